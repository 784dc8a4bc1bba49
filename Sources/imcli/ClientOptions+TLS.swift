import Foundation
import NIOSSL

extension ClientOptions {
    /// With --tls: a client configuration verifying the gateway's certificate against the
    /// system's roots, or only the CA certificates of --ca.
    func tlsConfiguration() throws -> TLSConfiguration? {
        guard tls else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let ca {
            guard FileManager.default.isReadableFile(atPath: ca) else {
                throw CLIFailure.usage("--ca \(ca): no such file, or not readable")
            }
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(ca)
            } catch {
                throw CLIFailure.usage("--ca \(ca): not a PEM certificate file (\(error))")
            }
            guard !certificates.isEmpty else { throw CLIFailure.usage("--ca \(ca): no certificate in it") }
            configuration.trustRoots = .certificates(certificates)
        }
        return configuration
    }
}
