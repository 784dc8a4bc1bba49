import Foundation
import IMWire

extension GatewayConfiguration {
    /// Throws ``GatewayConfigurationError/invalid(_:)`` with every problem of ``problems()``.
    public func validate() throws(GatewayConfigurationError) {
        let problems = self.problems()
        guard problems.isEmpty else { throw .invalid(problems) }
    }

    /// Every value that the gateway cannot run with, each an
    /// ``GatewayConfigurationError/invalidValue(key:value:reason:)`` naming its key path,
    /// e.g. `listen.port: 70000 is not a port`. Empty for a usable configuration.
    public func problems() -> [GatewayConfigurationError] {
        var check = Checker()
        check.identifier("gateway_id", self.gatewayID)
        check.topicLevel("topic_prefix", self.topicPrefix)

        check.nonEmpty("listen.host", self.listen.host)
        check.port("listen.port", self.listen.port, allowZero: true)
        check.range("listen.threads", self.listen.threads, 0...256)
        if let tls = self.listen.tls {
            check.nonEmpty("listen.tls.cert_file", tls.certFile)
            check.nonEmpty("listen.tls.key_file", tls.keyFile)
        }
        self.listen.websocket.check(&check)

        if let url = self.broker.url {
            do throws(GatewayConfigurationError) { _ = try BrokerURL(parsing: url) } catch { check.problems.append(error) }
        }
        check.range("broker.keepalive", self.broker.keepalive, 5...65535)
        check.range("broker.session_expiry", self.broker.sessionExpiry, 0...Int(UInt32.max))
        check.range("broker.max_inflight", self.broker.maxInflight, 1...65535)

        check.nonEmpty("embedded_broker.host", self.embeddedBroker.host)
        check.port("embedded_broker.port", self.embeddedBroker.port, allowZero: false)
        check.nonEmpty("embedded_broker.data_dir", self.embeddedBroker.dataDir)
        check.nonEmpty("embedded_broker.executable", self.embeddedBroker.executable)
        check.range("embedded_broker.max_queued_messages", self.embeddedBroker.maxQueuedMessages, 0...Int(Int32.max))

        switch self.archive.store {
        case .sqlite:
            check.nonEmpty("archive.path", self.archive.path)
        case .postgres:
            // (Its PostgreSQL syntax: `validateForGateway()` in IMGateway, which knows the archive.)
            if self.archive.url == nil {
                check.fail("archive.url", "(missing)", "is required with archive.store postgres")
            }
        case .none:
            break
        }
        check.range("archive.retention", self.archive.retention, 0...(100 * 365 * 86_400))
        check.range("archive.max_batch", self.archive.maxBatch, 1...100_000)
        check.range("archive.cache_mb", self.archive.cacheMB, 1...65_536)
        check.range("archive.max_per_conversation", self.archive.maxPerConversation, 0...100_000_000)
        check.range("archive.commit_delay_us", self.archive.commitDelayMicroseconds, 0...1_000_000)
        check.range("archive.write_timeout", self.archive.writeTimeout, 1...3600)
        check.range("archive.max_connections", self.archive.maxConnections, 2...1_000)

        check.nonEmpty("auth.jwt_secret", self.auth.jwtSecret)
        if let issuer = self.auth.issuer { check.nonEmpty("auth.issuer", issuer) }
        check.range("auth.leeway", self.auth.leeway, 0...3600)

        check.range("limits.max_body_length", self.limits.maxBodyLength, Self.bodyLengthRange)
        check.range("limits.login_timeout", self.limits.loginTimeout, 1...3600)
        check.range("limits.idle_timeout", self.limits.idleTimeout, 3...(3 * Int(UInt16.max)))
        check.range("limits.delivery_ack_timeout", self.limits.deliveryAckTimeout, 1...3600)
        check.range("limits.max_unacked_deliveries", self.limits.maxUnackedDeliveries, 1...65535)
        check.range("limits.compression_threshold", self.limits.compressionThreshold, 0...Int.max)
        let chatRate = self.limits.chatRate
        if !(chatRate.isFinite && chatRate >= 0) {
            check.fail("limits.chat_rate", "\(chatRate)", "is not a number >= 0 (0: no limit)")
        }
        check.range("limits.chat_burst", self.limits.chatBurst, 1...1_000_000)
        check.range("limits.max_subscriptions", self.limits.maxSubscriptions, 0...100_000)
        check.range("limits.max_watches", self.limits.maxWatches, 0...100_000)
        check.range("limits.max_connections_per_address", self.limits.maxConnectionsPerAddress, 0...1_000_000)
        check.range("limits.max_connections_awaiting_login", self.limits.maxConnectionsAwaitingLogin, 0...1_000_000)

        let rate = self.location.maxUpdatesPerSecond
        if !(rate.isFinite && rate > 0) {
            check.fail("location.max_updates_per_second", "\(rate)", "is not a positive number")
        }
        check.range("location.retain_expiry", self.location.retainExpiry, 1...Int(UInt32.max))
        check.range("location.max_share_duration", self.location.maxShareDuration, 1...Int(UInt32.max))

        check.topicLevel("pubsub.topic_space", self.pubsub.topicSpace)
        if self.pubsub.topicSpace == GatewayTopics.userLevel {
            check.fail("pubsub.topic_space", "\"u\"", "is the level of the per-user topics")
        }
        if self.pubsub.topicSpace == GatewayTopics.groupLevel {
            check.fail("pubsub.topic_space", "\"g\"", "is the level of the groups' topics")
        }
        check.range("pubsub.max_qos", self.pubsub.maxQoS, 0...2)

        check.range("stats_interval", self.statsInterval, 0...86400)
        check.nonEmpty("metrics.host", self.metrics.host)
        check.port("metrics.port", self.metrics.port, allowZero: true)
        check.nonEmpty("api.host", self.api.host)
        check.port("api.port", self.api.port, allowZero: true)
        check.identifier("api.system_sender", self.api.systemSender)
        check.range("api.revocation_retention", self.api.revocationRetention, 60...Int(UInt32.max))
        var names = Set<String>()
        var keys = Set<String>()
        for (index, key) in self.api.keys.enumerated() {
            check.identifier("api.keys[\(index)].name", key.name)
            if !names.insert(key.name).inserted { check.fail("api.keys[\(index)].name", key.name.debugDescription, "is the name of another key") }
            // The key itself is never repeated in a message.
            if key.key.utf8.count < 32 { check.fail("api.keys[\(index)].key", "(\(key.key.utf8.count) bytes)", "is shorter than 32 bytes; use a random one") }
            if !keys.insert(key.key).inserted { check.fail("api.keys[\(index)].key", "(of \(key.name))", "is another key's too") }
        }
        self.groups.check(&check)
        self.push.check(&check)
        if !Self.logLevels.contains(self.logLevel) {
            check.fail("log_level", self.logLevel.debugDescription, "is not one of \(Self.logLevels.joined(separator: ", "))")
        }
        return check.problems
    }

    /// Settings that work but are probably mistakes, one sentence each naming the key.
    public func warnings() -> [String] {
        var warnings: [String] = []
        if self.auth.jwtSecret == AuthSettings.insecureDefaultSecret {
            warnings.append("auth.jwt_secret is the built-in default: anyone can mint tokens; set a random secret of 32 bytes or more")
        } else if self.auth.jwtSecret.utf8.count < 32 {
            warnings.append("auth.jwt_secret is \(self.auth.jwtSecret.utf8.count) bytes long; HS256 wants 32 random bytes or more")
        }
        let tlsFiles = [("ca_file", self.broker.caFile), ("cert_file", self.broker.certFile), ("key_file", self.broker.keyFile)]
        if self.broker.parsedURL?.tls != true {
            for (key, value) in tlsFiles where value != nil {
                warnings.append("broker.\(key) is ignored: broker.url is not an mqtts:// URL")
            }
        }
        if self.broker.tlsInsecure {
            warnings.append("broker.tls_insecure is true: the broker's certificate host name is not checked")
        }
        if self.api.enabled && !Self.isLoopback(self.api.host) {
            warnings.append("api.host \(self.api.host) is reachable from the network over plain HTTP: API keys travel in clear text; put TLS in front of it")
        }
        if let url = self.push.url, let parsed = URL(string: url), parsed.scheme == "http", !Self.isLoopback(parsed.host ?? "") {
            warnings.append("push.url \(url) is plain HTTP: notifications (and previews) travel in clear text")
        }
        if self.listen.tls == nil && !Self.isLoopback(self.listen.host) {
            warnings.append("listen.host \(self.listen.host) is reachable from the network without listen.tls: tokens travel in clear text")
        }
        let websocket = self.listen.websocket
        if websocket.enabled && self.listen.tls == nil && !Self.isLoopback(websocket.host) {
            warnings.append("listen.websocket.host \(websocket.host) is reachable from the network without listen.tls: tokens travel in clear text (and browsers on https pages refuse ws://)")
        }
        if websocket.enabled && websocket.allowedOrigins.contains("*") {
            warnings.append("listen.websocket.allowed_origins has *: a page from any site may connect on its user's behalf, with a token it holds")
        }
        if self.archive.store == .none {
            warnings.append("archive.store is none: an ACK means only that the broker holds the message (a broker that dies loses what it queued), and devices cannot catch up")
        } else if self.archive.store == .sqlite && self.archive.url != nil {
            warnings.append("archive.url is ignored: archive.store is sqlite")
        }
        if self.limits.loginTimeout > self.limits.idleTimeout {
            warnings.append("limits.login_timeout (\(self.limits.loginTimeout)) is longer than limits.idle_timeout (\(self.limits.idleTimeout))")
        }
        return warnings
    }

    /// Allowed `limits.max_body_length`: room for a LOGIN with the largest token, up to the protocol's 10 MiB.
    public static let bodyLengthRange = 16384...IMWire.hardMaxBodyLength

    /// Allowed `log_level` values (swift-log's levels).
    public static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// Collects problems for ``GatewayConfiguration/problems()``.
struct Checker {
    var problems: [GatewayConfigurationError] = []

    mutating func fail(_ key: String, _ value: String, _ reason: String) {
        self.problems.append(.invalidValue(key: key, value: value, reason: reason))
    }

    mutating func range(_ key: String, _ value: Int, _ allowed: ClosedRange<Int>) {
        guard !allowed.contains(value) else { return }
        let upper = allowed.upperBound == Int.max ? "" : "\(allowed.upperBound)"
        self.fail(key, "\(value)", upper.isEmpty ? "is below \(allowed.lowerBound)" : "is not in \(allowed.lowerBound)...\(upper)")
    }

    mutating func port(_ key: String, _ value: Int, allowZero: Bool) {
        if !(allowZero ? 0...65535 : 1...65535).contains(value) { self.fail(key, "\(value)", "is not a port") }
    }

    mutating func nonEmpty(_ key: String, _ value: String) {
        if value.isEmpty { self.fail(key, "\"\"", "is empty") }
    }

    mutating func identifier(_ key: String, _ value: String) {
        do throws(IMIdentifierError) {
            try IMIdentifier.validate(value, kind: .device)
        } catch {
            self.fail(key, value.debugDescription, "is not a valid id (1-\(IMIdentifier.maxLength) bytes, no / + # $ or control characters)")
        }
    }

    mutating func topicLevel(_ key: String, _ value: String) {
        if let reason = GatewayTopics.invalidLevelReason(value) { self.fail(key, value.debugDescription, reason) }
    }
}
