import CryptoExtras
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The embedded broker's accounts, and the files that hold them.
///
/// - `imgw` (the gateway's): publish, receive, subscribe and unsubscribe under
///   `{prefix}/#`, any client id;
/// - `imgw-observer` (read-only, for debugging with `mosquitto_sub`): receive and subscribe
///   under `{prefix}/#` and `$SYS/#`, nothing else, and only with the client id
///   `imgw-observer`, so that it can never take over a device's session (`imgw/...`).
///
/// Anonymous clients are refused. The passwords are random (256 bits), created at the first
/// start and kept in the broker's data directory with mode 0600 (`gateway.password`,
/// `observer.password`); mosquitto's dynamic security plugin reads the accounts from
/// `dynamic-security.json` (0600), which imgw writes at every start. The plugin rather than
/// a password file and ACL file: it is the only way mosquitto 2.0 binds an account to a
/// client id.
public struct BrokerCredentials: Sendable, Hashable {
    /// The gateway's account.
    public static let gatewayUsername = "imgw"
    /// The read-only account, and the one client id it may connect with.
    public static let observerUsername = "imgw-observer"
    public static let observerClientID = "imgw-observer"

    /// The directory the files are in (the broker's data directory).
    public let directory: String
    public let gatewayPassword: String
    public let observerPassword: String

    public var gatewayPasswordFile: String { Self.path(directory, "gateway.password") }
    public var observerPasswordFile: String { Self.path(directory, "observer.password") }
    public var dynamicSecurityFile: String { Self.path(directory, "dynamic-security.json") }

    /// Reads both passwords from `directory`, creating each that is missing (random, mode
    /// 0600). A file others can read is made 0600.
    public static func loadOrCreate(in directory: String) throws(GatewayError) -> BrokerCredentials {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw .embeddedBrokerFailed("cannot create \(directory): \(error)")
        }
        return BrokerCredentials(
            directory: directory,
            gatewayPassword: try password(at: path(directory, "gateway.password")),
            observerPassword: try password(at: path(directory, "observer.password")))
    }

    init(directory: String, gatewayPassword: String, observerPassword: String) {
        self.directory = directory
        self.gatewayPassword = gatewayPassword
        self.observerPassword = observerPassword
    }

    /// The `mosquitto_sub` command that shows what travels under `{prefix}/`, with the
    /// observer's credentials (the password read from its file by the shell).
    public func observerCommand(host: String, port: Int, prefix: String) -> String {
        "mosquitto_sub -h \(host) -p \(port) -u \(Self.observerUsername) -P \"$(cat \(Self.shellQuoted(observerPasswordFile)))\" "
            + "-i \(Self.observerClientID) -v -t '\(prefix)/#'"
    }

    /// Writes the dynamic security plugin's configuration for `prefix` (mode 0600).
    func writeDynamicSecurity(prefix: String) throws(GatewayError) {
        let data: Data
        do {
            data = try dynamicSecurityJSON(prefix: prefix)
        } catch {
            throw .embeddedBrokerFailed("cannot make the broker's accounts: \(error)")
        }
        try Self.writePrivate(data, to: dynamicSecurityFile)
    }

    /// The plugin's configuration: default access denied everywhere, the two accounts and
    /// their roles.
    func dynamicSecurityJSON(prefix: String) throws -> Data {
        let all = "\(prefix)/#"
        let configuration = DynamicSecurity(
            defaultACLAccess: .init(publishClientSend: false, publishClientReceive: false, subscribe: false, unsubscribe: false),
            clients: [
                try .init(
                    username: Self.gatewayUsername, textname: "imgw, the gateway", clientid: nil, password: gatewayPassword,
                    roles: [.init(rolename: "gateway")]),
                try .init(
                    username: Self.observerUsername, textname: "read-only observer (mosquitto_sub)", clientid: Self.observerClientID,
                    password: observerPassword, roles: [.init(rolename: "observer")]),
            ],
            groups: [],
            roles: [
                .init(rolename: "gateway", acls: [
                    .init(acltype: "publishClientSend", topic: all, allow: true),
                    .init(acltype: "publishClientReceive", topic: all, allow: true),
                    .init(acltype: "subscribePattern", topic: all, allow: true),
                    .init(acltype: "unsubscribePattern", topic: all, allow: true),
                ]),
                .init(rolename: "observer", acls: [
                    .init(acltype: "publishClientReceive", topic: all, allow: true),
                    .init(acltype: "subscribePattern", topic: all, allow: true),
                    .init(acltype: "unsubscribePattern", topic: all, allow: true),
                    .init(acltype: "publishClientReceive", topic: "$SYS/#", allow: true),
                    .init(acltype: "subscribePattern", topic: "$SYS/#", allow: true),
                    .init(acltype: "unsubscribePattern", topic: "$SYS/#", allow: true),
                ]),
            ])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(configuration)
    }

    // MARK: Files

    private static func path(_ directory: String, _ name: String) -> String {
        (directory as NSString).appendingPathComponent(name)
    }

    /// The password in `path`, or a new one written there.
    private static func password(at path: String) throws(GatewayError) -> String {
        if let existing = try? String(contentsOfFile: path, encoding: .utf8) {
            let password = existing.trimmingCharacters(in: .whitespacesAndNewlines)
            if !password.isEmpty {
                // Whoever made it readable to others: not any more.
                _ = chmod(path, 0o600)
                return password
            }
        }
        var generator = SystemRandomNumberGenerator()
        let password = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        try writePrivate(Data((password + "\n").utf8), to: path)
        return password
    }

    /// Writes `data` to `path` with mode 0600, replacing it (created 0600, never readable
    /// to others in between).
    private static func writePrivate(_ data: Data, to path: String) throws(GatewayError) {
        let temporary = path + ".new"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .embeddedBrokerFailed("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let closed = close(fd)
        guard written == data.count, closed == 0, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw .embeddedBrokerFailed("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }

    private static func shellQuoted(_ text: String) -> String {
        text.allSatisfy { $0.isLetter || $0.isNumber || "/._-+~".contains($0) } ? text : "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

/// mosquitto 2.0's dynamic security plugin configuration (plugins/dynamic-security), as
/// much of it as imgw uses.
private struct DynamicSecurity: Encodable {
    struct DefaultAccess: Encodable {
        var publishClientSend: Bool
        var publishClientReceive: Bool
        var subscribe: Bool
        var unsubscribe: Bool
    }

    struct RoleReference: Encodable {
        var rolename: String
    }

    struct Client: Encodable {
        var username: String
        var textname: String
        var clientid: String?
        /// base64 of PBKDF2-HMAC-SHA512(password, salt, iterations), 64 bytes.
        var password: String
        var salt: String
        var iterations: Int
        var roles: [RoleReference]

        /// The passwords are 256 random bits, not chosen by people: key stretching adds
        /// nothing to them, and the broker runs it at every CONNECT (one per device login).
        static let iterations = 1

        init(username: String, textname: String, clientid: String?, password: String, roles: [RoleReference]) throws {
            var generator = SystemRandomNumberGenerator()
            let salt = (0..<12).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let key = try KDF.Insecure.PBKDF2.deriveKey(
                from: Array(password.utf8), salt: salt, using: .sha512, outputByteCount: 64,
                unsafeUncheckedRounds: Self.iterations)
            self.username = username
            self.textname = textname
            self.clientid = clientid
            self.password = key.withUnsafeBytes { Data($0).base64EncodedString() }
            self.salt = Data(salt).base64EncodedString()
            self.iterations = Self.iterations
            self.roles = roles
        }
    }

    struct ACL: Encodable {
        var acltype: String
        var topic: String
        var allow: Bool
    }

    struct Role: Encodable {
        var rolename: String
        var acls: [ACL]
    }

    var defaultACLAccess: DefaultAccess
    var clients: [Client]
    var groups: [String]
    var roles: [Role]
}
