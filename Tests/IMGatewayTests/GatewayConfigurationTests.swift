import Foundation
import IMGateway
import Testing

@Suite("Gateway configuration")
struct GatewayConfigurationTests {
    @Test("an empty document, or one of comments only, gives the defaults", arguments: ["", "# nothing\n", "---\n", "~\n"])
    func empty(_ yaml: String) throws {
        #expect(try GatewayConfiguration.parse(yaml: yaml) == .defaults)
    }

    @Test("the defaults are the documented ones")
    func defaults() {
        let d = GatewayConfiguration.defaults
        #expect(d.topicPrefix == "im" && d.listen == .init(host: "127.0.0.1", port: 6969, tls: nil))
        #expect(d.broker.url == nil && d.broker.keepalive == 30 && d.broker.sessionExpiry == 604_800 && d.broker.maxInflight == 128)
        #expect(d.embeddedBroker.port == 1883 && d.embeddedBroker.executable == "/usr/sbin/mosquitto")
        #expect(d.auth == .init(jwtSecret: "change-me-in-production", issuer: nil, leeway: 30))
        #expect(d.limits == .init(maxBodyLength: 1_048_576, loginTimeout: 10, idleTimeout: 90, deliveryAckTimeout: 30, maxUnackedDeliveries: 64, compressionThreshold: 1024))
        #expect(d.limits.heartbeatInterval == 30)
        #expect(d.location == .init(maxUpdatesPerSecond: 1, retainExpiry: 3600, maxShareDuration: 86400))
        #expect(d.pubsub == .init(topicSpace: "t", allowPublish: true, allowSubscribe: true, maxQoS: 2))
        #expect(d.statsInterval == 10 && d.metrics == .init(host: "127.0.0.1", port: 9469, enabled: true) && d.logLevel == "info")
        #expect(d.problems() == [])
        #expect(IMIdentifier.isValid(d.gatewayID))
    }

    @Test("snake_case keys fill camelCase fields; absent keys keep their defaults")
    func mapping() throws {
        let config = try GatewayConfiguration.parse(yaml: """
            gateway_id: gw-7
            topic_prefix: chat
            listen:
              port: 7000
              tls: {cert_file: /c.pem, key_file: ~/k.pem}
            broker:
              url: mqtts://broker:8884
              username: imgw
              tls_insecure: true
              session_expiry: 60
            embedded_broker: {data_dir: /tmp/b, max_queued_messages: 5}
            auth: {jwt_secret: s3cr3t, issuer: me, leeway: 5}
            limits: {max_body_length: 65536, idle_timeout: 30}
            location: {max_updates_per_second: 0.5}
            pubsub: {topic_space: rooms, allow_publish: false, max_qos: 1}
            stats_interval: 0
            metrics: {enabled: false}
            log_level: debug
            """)
        #expect(config.gatewayID == "gw-7" && config.topicPrefix == "chat")
        #expect(config.listen.host == "127.0.0.1" && config.listen.port == 7000)
        let home = ProcessInfo.processInfo.environment["HOME"] ?? "~"
        #expect(config.listen.tls == .init(certFile: "/c.pem", keyFile: home + "/k.pem"))
        #expect(config.broker.parsedURL == BrokerURL(host: "broker", port: 8884, tls: true))
        #expect(config.broker.username == "imgw" && config.broker.password == nil && config.broker.tlsInsecure)
        #expect(config.broker.sessionExpiry == 60 && config.broker.keepalive == 30)
        #expect(config.embeddedBroker.dataDir == "/tmp/b" && config.embeddedBroker.maxQueuedMessages == 5)
        #expect(config.auth == .init(jwtSecret: "s3cr3t", issuer: "me", leeway: 5))
        #expect(config.limits.maxBodyLength == 65536 && config.limits.idleTimeout == 30 && config.limits.loginTimeout == 10)
        #expect(config.location.maxUpdatesPerSecond == 0.5 && config.location.retainExpiry == 3600)
        #expect(config.pubsub == .init(topicSpace: "rooms", allowPublish: false, allowSubscribe: true, maxQoS: 1))
        #expect(config.statsInterval == 0 && !config.metrics.enabled && config.logLevel == "debug")
        #expect(config.topics == GatewayTopics(prefix: "chat", pubsubSpace: "rooms"))
    }

    @Test("unknown keys are refused by their path", arguments: [
        ("gateway: x", "gateway"), ("listen:\n  prot: 1", "listen.prot"), ("listen:\n  tls: {cert_file: a, key_file: b, ca: c}", "listen.tls.ca"),
        ("broker: {URL: mqtt://x}", "broker.URL"), ("limits: {max_body_lenght: 1}", "limits.max_body_lenght"),
    ])
    func unknownKey(_ yaml: String, _ key: String) {
        #expect(throws: GatewayConfigurationError.unknownKey(key)) { try GatewayConfiguration.parse(yaml: yaml) }
    }

    @Test("a key written twice is refused")
    func duplicateKey() {
        let error = #expect(throws: GatewayConfigurationError.self) {
            try GatewayConfiguration.parse(yaml: "listen:\n  port: 1\n  port: 2\n")
        }
        guard case .syntax(let message)? = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
        #expect(message.contains("'port'"))
    }

    @Test("values of the wrong type name key and value", arguments: [
        ("listen:\n  port: abc", "listen.port: \"abc\" is not an integer"),
        ("listen:\n  port: 6969.5", "listen.port: 6969.5 is not an integer"),
        ("listen: 5", "listen: 5 is not a mapping"),
        ("metrics: {enabled: maybe}", "metrics.enabled: \"maybe\" is not true or false"),
        ("location: {max_updates_per_second: fast}", "location.max_updates_per_second: \"fast\" is not a number"),
        ("listen:\n  tls: {cert_file: a}", "listen.tls.key_file: (missing) is required here"),
        ("- a\n- b", "(top level): a list is not a mapping"),
    ])
    func wrongType(_ yaml: String, _ message: String) {
        let error = #expect(throws: GatewayConfigurationError.self) { try GatewayConfiguration.parse(yaml: yaml) }
        #expect(error?.description == message)
    }

    @Test("broken YAML is a syntax error with its position")
    func syntax() {
        let error = #expect(throws: GatewayConfigurationError.self) { try GatewayConfiguration.parse(yaml: "listen: [1,\n") }
        guard case .syntax(let message)? = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
        #expect(message.contains("2:"))
    }

    @Test("archive.max_per_conversation: a cap for the archive, 0 none, a negative one a problem naming its key")
    func maxPerConversation() throws {
        let capped = try GatewayConfiguration.parse(yaml: "archive: {max_per_conversation: 500}")
        #expect(capped.archive.archiveSettings.maxPerConversation == 500)
        #expect(try GatewayConfiguration.parse(yaml: "archive: {max_per_conversation: 0}").archive.archiveSettings.maxPerConversation == nil)
        #expect(GatewayConfiguration.defaults.archive.archiveSettings.maxPerConversation == nil)
        var config = GatewayConfiguration.defaults
        config.archive.maxPerConversation = -1
        #expect(config.problems().map(\.description) == ["archive.max_per_conversation: -1 is not in 0...100000000"])
    }

    @Test("archive.cache_mb: the SQLite archive writer's page cache, 64 MB unless set, out of 1...65536 a problem naming its key")
    func cacheMB() throws {
        #expect(try GatewayConfiguration.parse(yaml: "archive: {cache_mb: 512}").archive.cacheMB == 512)
        #expect(GatewayConfiguration.defaults.archive.cacheMB == 64)
        var config = GatewayConfiguration.defaults
        config.archive.cacheMB = 0
        #expect(config.problems().map(\.description) == ["archive.cache_mb: 0 is not in 1...65536"])
    }

    @Test("archive.url: required with postgres; its syntax is checked by what imgw runs (validateForGateway), its password never shown")
    func postgresURL() throws {
        var config = GatewayConfiguration.defaults
        config.archive.store = .postgres
        #expect(config.problems().map(\.description) == ["archive.url: (missing) is required with archive.store postgres"])
        config.archive.url = "mysql://imgw:s3cret@db/im"
        // The configuration module alone does not know PostgreSQL's URL grammar; the gateway does.
        #expect(config.problems() == [])
        let error = #expect(throws: GatewayConfigurationError.self) { try config.validateForGateway() }
        let text = error.map { "\($0)" } ?? ""
        #expect(text.contains("archive.url") && text.contains("is not a PostgreSQL URL"), "\(text)")
        #expect(!text.contains("s3cret"), "\(text)")
        config.archive.url = "postgres://imgw:s3cret@db:5432/im"
        try config.validateForGateway()
    }

    @Test("listen.websocket: off by default; its keys parsed; a bad path, origin or development off loopback is a problem")
    func websocket() throws {
        #expect(!GatewayConfiguration.defaults.listen.websocket.enabled)
        let config = try GatewayConfiguration.parse(yaml: """
            listen:
              websocket: {enabled: true, host: 127.0.0.1, port: 7001, path: /ws, allowed_origins: ["https://app.example.com"], development: true}
            """)
        #expect(config.listen.websocket == .init(
            enabled: true, host: "127.0.0.1", port: 7001, path: "/ws", allowedOrigins: ["https://app.example.com"], development: true))
        #expect(config.problems().isEmpty)
        var bad = config
        bad.listen.websocket.host = "0.0.0.0"
        bad.listen.websocket.path = "ws"
        bad.listen.websocket.allowedOrigins = ["app.example.com"]
        #expect(bad.problems().map(\.description) == [
            "listen.websocket.path: \"ws\" is not a path (one that starts with /, without a query)",
            "listen.websocket.allowed_origins: \"app.example.com\" is not an origin (scheme://host[:port]) or *",
            "listen.websocket.development: true is for a developer's machine (anyone who reaches the listener can log in as any user): only with a loopback listen.websocket.host, not 0.0.0.0",
        ])
        bad.listen.websocket.development = false
        bad.listen.websocket.path = "/imclient.js"
        bad.listen.websocket.allowedOrigins = ["*"]
        #expect(bad.problems().map(\.description) == ["listen.websocket.path: \"/imclient.js\" is a path of the pages the listener serves"])
        #expect(bad.warnings().contains { $0.hasPrefix("listen.websocket.host 0.0.0.0 is reachable from the network without listen.tls") })
        #expect(bad.warnings().contains { $0.hasPrefix("listen.websocket.allowed_origins has *") })
        bad.listen.websocket.enabled = false
        #expect(bad.problems().isEmpty)
    }

    @Test("validate reports every problem, each naming its key")
    func problems() {
        var config = GatewayConfiguration.defaults
        config.gatewayID = "a/b"
        config.topicPrefix = "#"
        config.listen.port = 70000
        config.broker.url = "http://x"
        config.broker.keepalive = 1
        config.embeddedBroker.port = 0
        config.auth.jwtSecret = ""
        config.limits.maxBodyLength = 11 << 20
        config.limits.idleTimeout = 2
        config.location.maxUpdatesPerSecond = 0
        config.pubsub.topicSpace = "u"
        config.pubsub.maxQoS = 3
        config.metrics.port = -1
        config.logLevel = "loud"
        #expect(config.problems().map(\.description) == [
            "gateway_id: \"a/b\" is not a valid id (1-64 bytes, no / + # $ or control characters)",
            "topic_prefix: \"#\" contains \"#\" (one topic level without / + # $ or control characters)",
            "listen.port: 70000 is not a port",
            "broker.url: \"http://x\" is not mqtt://HOST[:PORT] or mqtts://HOST[:PORT]",
            "broker.keepalive: 1 is not in 5...65535",
            "embedded_broker.port: 0 is not a port",
            "auth.jwt_secret: \"\" is empty",
            "limits.max_body_length: 11534336 is not in 16384...10485760",
            "limits.idle_timeout: 2 is not in 3...196605",
            "location.max_updates_per_second: 0.0 is not a positive number",
            "pubsub.topic_space: \"u\" is the level of the per-user topics",
            "pubsub.max_qos: 3 is not in 0...2",
            "metrics.port: -1 is not a port",
            "log_level: \"loud\" is not one of trace, debug, info, notice, warning, error, critical",
        ])
        #expect(throws: GatewayConfigurationError.invalid(config.problems())) { try config.validate() }
    }

    @Test("push: a URL needs http(s) and a host and a secret of 32 bytes; each bound is checked")
    func pushProblems() throws {
        var config = GatewayConfiguration.defaults
        config.push = .init(url: "ftp://backend/push", secret: "short", previewLength: 0, delayMilliseconds: 10_001, timeout: 0, maxAttempts: 0, queue: 0, concurrency: 0)
        #expect(config.problems().map(\.description) == [
            "push.preview_length: 0 is not in 1...10000",
            "push.delay_ms: 10001 is not in 0...10000",
            "push.timeout: 0 is not in 1...300",
            "push.max_attempts: 0 is not in 1...100",
            "push.queue: 0 is not in 1...10000000",
            "push.concurrency: 0 is not in 1...1024",
            "push.url: \"ftp://backend/push\" is not an http:// or https:// URL",
            "push.secret: (5 bytes) is shorter than 32 bytes; the receiver checks signatures with it: use a random one",
        ])
        config.push = .init(url: "https:///push", secret: String(repeating: "s", count: 32))
        #expect(config.problems().map(\.description) == ["push.url: \"https:///push\" is not an http:// or https:// URL"])
        config.push.url = "http://127.0.0.1:8080/push"
        #expect(config.problems() == [])
        config.auth.jwtSecret = String(repeating: "k", count: 32)
        #expect(config.warnings() == [], "plain HTTP on loopback")
        config.push.url = "http://backend.internal/push"
        #expect(config.warnings() == ["push.url http://backend.internal/push is plain HTTP: notifications (and previews) travel in clear text"])
        let parsed = try GatewayConfiguration.parse(yaml: "push: {url: 'https://b/p', secret: '\(String(repeating: "s", count: 32))', preview: text, delay_ms: 0}")
        #expect(parsed.push.enabled && parsed.push.preview == .text && parsed.push.delayMilliseconds == 0)
        #expect(!GatewayConfiguration.defaults.push.enabled)
        #expect(throws: (any Error).self) { try GatewayConfiguration.parse(yaml: "push: {preview: full}") }
    }

    @Test("parse validates")
    func parseValidates() {
        #expect(throws: GatewayConfigurationError.invalid([.invalidValue(key: "listen.port", value: "70000", reason: "is not a port")])) {
            try GatewayConfiguration.parse(yaml: "listen: {port: 70000}")
        }
    }

    @Test("warnings are separate from errors")
    func warnings() {
        var config = GatewayConfiguration.defaults
        #expect(config.warnings().count == 1)
        #expect(config.warnings().first?.hasPrefix("auth.jwt_secret is the built-in default") == true)
        config.auth.jwtSecret = String(repeating: "k", count: 32)
        #expect(config.warnings() == [])
        config.auth.jwtSecret = "short"
        #expect(config.warnings() == ["auth.jwt_secret is 5 bytes long; HS256 wants 32 random bytes or more"])
        config.auth.jwtSecret = String(repeating: "k", count: 32)
        config.broker.caFile = "/ca.pem"
        config.listen.host = "0.0.0.0"
        #expect(config.warnings() == [
            "broker.ca_file is ignored: broker.url is not an mqtts:// URL",
            "listen.host 0.0.0.0 is reachable from the network without listen.tls: tokens travel in clear text",
        ])
        config.broker.url = "mqtts://b"
        config.listen.tls = .init(certFile: "c", keyFile: "k")
        #expect(config.warnings() == [])
        #expect(config.problems() == [])
    }

    @Test("broker URLs", arguments: [
        ("mqtt://localhost", BrokerURL(host: "localhost", port: 1883, tls: false)),
        ("mqtts://broker.example.com", BrokerURL(host: "broker.example.com", port: 8883, tls: true)),
        ("mqtt://10.0.0.1:1884/", BrokerURL(host: "10.0.0.1", port: 1884, tls: false)),
        ("MQTTS://[::1]:8884", BrokerURL(host: "::1", port: 8884, tls: true)),
        ("mqtt://[fe80::1]", BrokerURL(host: "fe80::1", port: 1883, tls: false)),
    ])
    func brokerURL(_ text: String, _ expected: BrokerURL) throws {
        #expect(try BrokerURL(parsing: text) == expected)
    }

    @Test("bad broker URLs are refused", arguments: [
        "localhost:1883", "tcp://x", "mqtt://", "mqtt://:1883", "mqtt://x:0", "mqtt://x:65536", "mqtt://x:port",
        "mqtt://user:pw@x", "mqtt://x/path", "mqtt://x?q", "mqtt://[::1", "mqtt://[::1]x",
    ])
    func badBrokerURL(_ text: String) {
        let error = #expect(throws: GatewayConfigurationError.self) { try BrokerURL(parsing: text) }
        guard case .invalidValue(let key, _, _)? = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
        #expect(key == "broker.url")
    }

    @Test("the embedded broker's data directory follows XDG and root")
    func dataDirectory() {
        #expect(GatewayConfiguration.defaultDataDirectory(environment: ["HOME": "/home/a"], isRoot: true) == "/var/lib/imgw/broker")
        #expect(
            GatewayConfiguration.defaultDataDirectory(environment: ["HOME": "/home/a", "XDG_STATE_HOME": "/state"], isRoot: false)
                == "/state/imgw/broker")
        #expect(
            GatewayConfiguration.defaultDataDirectory(environment: ["HOME": "/home/a", "XDG_STATE_HOME": "relative"], isRoot: false)
                == "/home/a/.local/state/imgw/broker")
        #expect(GatewayConfiguration.defaultDataDirectory(environment: ["HOME": "/home/a"], isRoot: false) == "/home/a/.local/state/imgw/broker")
    }

    @Test("loading a missing file names it")
    func unreadable() {
        let error = #expect(throws: GatewayConfigurationError.self) { try GatewayConfiguration.load(from: "/nonexistent/imgw.yaml") }
        guard case .unreadable(let path, _)? = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
        #expect(path == "/nonexistent/imgw.yaml")
    }

    @Test("the configuration round-trips through Codable")
    func codable() throws {
        var config = GatewayConfiguration.defaults
        config.broker.url = "mqtt://x"
        config.listen.tls = .init(certFile: "c", keyFile: "k")
        let data = try JSONEncoder().encode(config)
        #expect(try JSONDecoder().decode(GatewayConfiguration.self, from: data) == config)
    }
}

@Suite("listen.threads")
struct ListenThreadsTests {
    @Test("0 is one per core less one, at least one; a number is taken as it is; out of range is refused")
    func eventLoopThreads() throws {
        let automatic = GatewayConfiguration.ListenSettings()
        #expect(automatic.eventLoopThreads(cores: 1) == 1)
        #expect(automatic.eventLoopThreads(cores: 2) == 1)
        #expect(automatic.eventLoopThreads(cores: 8) == 7)
        #expect(GatewayConfiguration.ListenSettings(threads: 3).eventLoopThreads(cores: 2) == 3)
        var configuration = GatewayConfiguration.defaults
        configuration.listen.threads = -1
        #expect(configuration.problems().contains { "\($0)".contains("listen.threads") })
    }
}
