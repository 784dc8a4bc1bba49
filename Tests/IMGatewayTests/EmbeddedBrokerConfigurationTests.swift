import Foundation
import IMGateway
import Logging
import Testing

@testable import IMGateway

#if canImport(Glibc)
import Glibc
#endif

@Suite("The embedded broker's configuration")
struct EmbeddedBrokerConfigurationTests {
    private static func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("imgw-broker-\(UUID().uuidString.prefix(8))").path
    }

    @Test("mosquitto.conf: the configured listener, persistence in the data directory, TCP_NODELAY, no anonymous clients, the security plugin")
    func configuration() throws {
        var settings = GatewayConfiguration.defaults.embeddedBroker
        settings.host = "127.0.0.1"
        settings.port = 18830
        settings.dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: settings.dataDir) }
        let broker = try EmbeddedBroker(settings: settings, topicPrefix: "im", logger: Logger(label: "test"))
        let lines = broker.configurationText().split(separator: "\n").map(String.init)
        #expect(lines.contains("listener 18830 127.0.0.1"))
        #expect(lines.contains("persistence_location \(settings.dataDir)/"))
        #expect(lines.contains("set_tcp_nodelay true"))
        #expect(lines.contains("allow_anonymous false"))
        #expect(!lines.contains("allow_anonymous true"))
        let plugin = try #require(EmbeddedBroker.findSecurityPlugin(), "mosquitto's dynamic security plugin is installed here")
        #expect(lines.contains("plugin \(plugin)"))
        #expect(lines.contains("plugin_opt_config_file \(settings.dataDir)/dynamic-security.json"))
        #expect(broker.endpoint.username == BrokerCredentials.gatewayUsername)
        #expect(broker.endpoint.password == broker.credentials.gatewayPassword)
        #expect(broker.observerCommand.hasPrefix("mosquitto_sub -h 127.0.0.1 -p 18830 -u imgw-observer -P \"$(cat \(settings.dataDir)/observer.password)\" -i imgw-observer"))
    }

    @Test("passwords: random, mode 0600, kept across starts; a file made readable to others is made 0600 again")
    func passwords() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try BrokerCredentials.loadOrCreate(in: directory)
        #expect(first.gatewayPassword.count == 64 && first.observerPassword.count == 64)
        #expect(first.gatewayPassword != first.observerPassword)
        for file in [first.gatewayPasswordFile, first.observerPasswordFile] {
            var info = stat()
            #expect(stat(file, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600, "\(file)")
        }
        chmod(first.observerPasswordFile, 0o644)
        let again = try BrokerCredentials.loadOrCreate(in: directory)
        #expect(again == first)
        var info = stat()
        #expect(stat(first.observerPasswordFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let other = try BrokerCredentials.loadOrCreate(in: Self.temporaryDirectory())
        defer { try? FileManager.default.removeItem(atPath: other.directory) }
        #expect(other.gatewayPassword != first.gatewayPassword)
    }

    @Test("the plugin's accounts: default access denied; the gateway under the prefix with any client id; the observer read-only, bound to its client id")
    func dynamicSecurity() throws {
        let directory = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let credentials = try BrokerCredentials.loadOrCreate(in: directory)
        try credentials.writeDynamicSecurity(prefix: "chat")
        var info = stat()
        #expect(stat(credentials.dynamicSecurityFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let data = try Data(contentsOf: URL(fileURLWithPath: credentials.dynamicSecurityFile))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let defaults = try #require(json["defaultACLAccess"] as? [String: Bool])
        #expect(defaults.values.allSatisfy { $0 == false } && defaults.count == 4)
        let clients = try #require(json["clients"] as? [[String: Any]])
        let gateway = try #require(clients.first { $0["username"] as? String == "imgw" })
        let observer = try #require(clients.first { $0["username"] as? String == "imgw-observer" })
        #expect(gateway["clientid"] == nil)
        #expect(observer["clientid"] as? String == "imgw-observer")
        #expect((gateway["password"] as? String)?.isEmpty == false && (gateway["salt"] as? String)?.isEmpty == false)
        #expect(!String(decoding: data, as: UTF8.self).contains(credentials.gatewayPassword), "only hashes in the file")
        let roles = try #require(json["roles"] as? [[String: Any]])
        func acls(_ role: String) -> [(String, String)] {
            let acls = roles.first { $0["rolename"] as? String == role }?["acls"] as? [[String: Any]] ?? []
            return acls.compactMap { acl in (acl["allow"] as? Bool == true) ? (acl["acltype"] as? String ?? "", acl["topic"] as? String ?? "") : nil }
        }
        #expect(acls("gateway").contains { $0 == ("publishClientSend", "chat/#") })
        #expect(acls("gateway").contains { $0 == ("subscribePattern", "chat/#") })
        #expect(!acls("observer").contains { $0.0 == "publishClientSend" }, "the observer publishes nothing")
        #expect(acls("observer").contains { $0 == ("subscribePattern", "chat/#") })
    }
}
