import CMosquitto

/// An MQTT v5 reason code (CONNACK, PUBACK, SUBACK, DISCONNECT...), with its text.
public struct ReasonCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public init(_ rawValue: UInt8) { self.rawValue = rawValue }

    /// Codes of 0x80 and above are failures; below are successes.
    public var isFailure: Bool { rawValue >= 0x80 }

    public static let success = ReasonCode(0x00)
    public static let normalDisconnection = ReasonCode(0x00)
    /// DISCONNECT reason 0x04: the broker publishes the client's will.
    public static let disconnectWithWill = ReasonCode(0x04)
    public static let noMatchingSubscribers = ReasonCode(0x10)
    public static let unspecifiedError = ReasonCode(0x80)
    public static let notAuthorized = ReasonCode(0x87)
    public static let badUsernameOrPassword = ReasonCode(0x86)
    public static let serverUnavailable = ReasonCode(0x88)
    public static let serverBusy = ReasonCode(0x89)
    public static let serverShuttingDown = ReasonCode(0x8B)
    public static let keepAliveTimeout = ReasonCode(0x8D)
    public static let sessionTakenOver = ReasonCode(0x8E)
    public static let topicFilterInvalid = ReasonCode(0x8F)
    public static let quotaExceeded = ReasonCode(0x97)
    public static let sharedSubscriptionsNotSupported = ReasonCode(0x9E)
    public static let subscriptionIdentifiersNotSupported = ReasonCode(0xA1)
    public static let wildcardSubscriptionsNotSupported = ReasonCode(0xA2)

    public var description: String {
        let text = mosquitto_reason_string(Int32(rawValue)).map { String(cString: $0) } ?? "unknown"
        return "\(text) (0x\(String(rawValue, radix: 16, uppercase: true)))"
    }
}

/// Every failure of the `Mosquitto` module.
public enum MosquittoError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A libmosquitto call failed: its `MOSQ_ERR_*` code and `mosquitto_strerror` text.
    case library(code: Int32, message: String)
    /// The broker refused the connection (v5 CONNACK reason code, or the v3.1.1 return
    /// code mapped to its v5 equivalent).
    case connectionRefused(ReasonCode)
    /// The client is not connected: nothing was sent or queued.
    case notConnected
    /// The connection was lost while the operation waited.
    case connectionLost(LossReason)
    /// The broker rejected a publish (v5 PUBACK/PUBREC reason code >= 0x80).
    case publishRejected(ReasonCode)
    /// The broker refused a subscription (SUBACK reason code >= 0x80).
    case subscriptionRejected(filter: String, ReasonCode)
    /// No CONNACK within the configured connect timeout.
    case connectTimeout
    /// The client was closed (or is closing) while the operation waited.
    case closed
    /// An argument libmosquitto would reject (bad topic, QoS, oversized payload...).
    case invalidArgument(String)
    /// The operation is not valid in the client's current state.
    case invalidState(String)

    /// Builds `.library` from a `MOSQ_ERR_*` code.
    public static func code(_ rc: Int32) -> MosquittoError {
        .library(code: rc, message: text(of: rc))
    }

    /// What a `MOSQ_ERR_*` code means: `mosquitto_strerror`'s text, or ours for the codes
    /// that older libmosquitto versions (Debian's 2.0.11 among them) call "Unknown error.".
    public static func text(of rc: Int32) -> String {
        let library = String(cString: mosquitto_strerror(rc))
        guard library == "Unknown error." else { return library }
        switch rc {
        case 17: return "plugin deferred"
        case 19: return "no answer from the broker within the keepalive"
        case 20: return "host name lookup failed"
        case 21: return "malformed packet"
        case 27: return "timed out"
        case 28: return "retain not supported by the broker"
        case 29: return "invalid topic alias"
        case 30: return "administrative action"
        case 31: return "already exists"
        default: return library
        }
    }

    public var description: String {
        switch self {
        case .library(let code, let message): return "libmosquitto error \(code): \(message)"
        case .connectionRefused(let reason): return "connection refused by broker: \(reason)"
        case .notConnected: return "not connected"
        case .connectionLost(let reason): return "connection lost: \(reason)"
        case .publishRejected(let reason): return "publish rejected by broker: \(reason)"
        case .subscriptionRejected(let filter, let reason): return "subscription to \"\(filter)\" rejected: \(reason)"
        case .connectTimeout: return "no CONNACK within the connect timeout"
        case .closed: return "client closed"
        case .invalidArgument(let what): return "invalid argument: \(what)"
        case .invalidState(let what): return "invalid state: \(what)"
        }
    }
}

/// Why a connection ended.
public enum LossReason: Sendable, Hashable, CustomStringConvertible {
    /// We disconnected on purpose (DISCONNECT sent).
    case normal
    /// The broker sent DISCONNECT with this reason (e.g. 0x8E session taken over).
    case broker(ReasonCode)
    /// A local error: libmosquitto code and text (connection lost, keepalive, TLS...).
    case error(code: Int32, message: String)
    /// We dropped the socket without sending anything (`abort()`).
    case aborted

    /// Interprets the `rc` of libmosquitto's `on_disconnect_v5`: 0 for a normal
    /// disconnect, a v5 reason code (>= 0x80) when the broker sent DISCONNECT, otherwise
    /// a `MOSQ_ERR_*` code.
    init(disconnectCode rc: Int32) {
        if rc == 0 {
            self = .normal
        } else if rc >= 0x80 && rc <= 0xFF {
            self = .broker(ReasonCode(UInt8(rc)))
        } else {
            self = .error(code: rc, message: MosquittoError.text(of: rc))
        }
    }

    public var description: String {
        switch self {
        case .normal: return "normal disconnect"
        case .broker(let reason): return "broker sent DISCONNECT: \(reason)"
        case .error(let code, let message): return "\(message) (libmosquitto \(code))"
        case .aborted: return "aborted locally"
        }
    }
}

extension Int32 {
    /// Throws `MosquittoError.library` unless this is `MOSQ_ERR_SUCCESS`.
    @inline(__always)
    func check() throws(MosquittoError) {
        if self != Int32(MOSQ_ERR_SUCCESS.rawValue) { throw MosquittoError.code(self) }
    }
}
