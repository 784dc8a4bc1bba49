import Mosquitto

/// What the gateway makes of a broker's CONNACK (``BrokerCapabilities``): whether it can work
/// there at all, what it adapts to, and what the operator should know. Pure: the login, the
/// HELLO answer and the log lines use it.
///
/// - Refused (``problems``): a broker that takes only QoS 0 (chat is at least once), keeps no
///   retained messages (presence, group membership, location shares and token revocations
///   are retained), or takes no wildcard filters (the gateway follows
///   `{prefix}/u/{user}/presence/+` and `{prefix}/g/{group}/members/+`).
/// - Adapted: chat at QoS 2 and pub/sub above the broker's Maximum QoS are refused to the
///   device with QOS_NOT_SUPPORTED instead of ending the session (a PUBLISH above it is a
///   protocol error); HELLO_OK leaves out QOS2_CHAT; the window of a group's copies is the
///   smaller of `broker.max_inflight` and the broker's Receive Maximum.
/// - Told (``notes``): a session expiry shorter than `broker.session_expiry` (offline queues
///   end sooner), a keepalive the broker imposes, a Receive Maximum of a handful, a packet limit.
struct BrokerFit: Sendable, Hashable {
    /// Why imgw cannot work with this broker; empty when it can.
    let problems: [String]
    /// What differs from what the configuration asks, for the log.
    let notes: [String]
    /// The highest QoS the gateway may publish with.
    let maximumQoS: QoS
    /// Publishes of one request (a group's copies) in flight at once.
    let publishWindow: Int

    init(_ capabilities: BrokerCapabilities, broker settings: GatewayConfiguration.BrokerSettings) {
        var problems: [String] = []
        if capabilities.maximumQoS == .atMostOnce {
            problems.append("the broker takes only QoS 0 (Maximum QoS 0): chat needs QoS 1")
        }
        if !capabilities.retainAvailable {
            problems.append("the broker keeps no retained messages (Retain Available 0): presence, group membership, location shares and token revocations are retained")
        }
        if !capabilities.wildcardSubscriptionAvailable {
            problems.append("the broker takes no wildcard filters (Wildcard Subscription Available 0): the gateway follows presence and group members with them")
        }
        var notes: [String] = []
        if capabilities.maximumQoS == .atLeastOnce {
            notes.append("the broker takes at most QoS 1: devices are not offered QoS 2 chat, and pub/sub above QoS 1 is refused")
        }
        if let expiry = capabilities.sessionExpiryInterval, Int(expiry) < settings.sessionExpiry {
            notes.append("the broker keeps an offline device's session \(expiry) s, not broker.session_expiry \(settings.sessionExpiry) s: messages to a device offline longer are lost (raise the broker's limit)")
        }
        if let keepalive = capabilities.serverKeepAlive, Int(keepalive) != settings.keepalive {
            notes.append("the broker sets the keepalive to \(keepalive) s instead of broker.keepalive \(settings.keepalive) s")
        }
        // (mosquitto announces its max_inflight_messages, 20 by default: a window, not a limit
        // worth a line. A handful is: each session's throughput is then bound by round trips.)
        if Int(capabilities.receiveMaximum) < min(Self.fewInFlight, settings.maxInflight) {
            notes.append("the broker takes only \(capabilities.receiveMaximum) unacknowledged publishes per session (Receive Maximum): each session's throughput is bound by its round trip to the broker")
        }
        if let size = capabilities.maximumPacketSize {
            notes.append("the broker takes packets of at most \(size) bytes: larger messages are refused to the device")
        }
        self.problems = problems
        self.notes = notes
        maximumQoS = capabilities.maximumQoS
        publishWindow = max(1, min(settings.maxInflight, Int(capabilities.receiveMaximum)))
    }

    /// A Receive Maximum below this is worth telling the operator.
    static let fewInFlight = 10

    /// Whether the gateway can work with this broker.
    var isUsable: Bool { problems.isEmpty }

    /// One sentence for a refused login or a log line.
    var refusal: String { "the broker cannot carry imgw: " + problems.joined(separator: "; ") }
}
