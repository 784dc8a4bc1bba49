#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback port that refuses connections for as long as this value is open: a TCP
/// socket bound to it that never listens. Safer than a port freed by a stopped server,
/// which another listener, or a connection to itself, may take in a busy test run.
final class ClosedPort {
    let port: Int
    private let descriptor: CInt

    init() throws {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw ClosedPortError.failed("socket", errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
            }
        }
        guard bound else {
            let error = errno
            close(descriptor)
            throw ClosedPortError.failed("bind", error)
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        close(descriptor)
    }
}

enum ClosedPortError: Error {
    case failed(String, CInt)
}
