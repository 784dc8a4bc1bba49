import Foundation
import IMClient

/// Prints results and events: human lines by default, one JSON object per line with
/// --json. Data goes to stdout, each line written as it comes (not buffered); status notes,
/// connection notices and failures go to stderr (with --json, notices and failures are also
/// JSON lines on stdout, so a script sees everything in one stream).
struct Output: Sendable {
    var json: Bool

    // MARK: Results

    func sent(_ receipt: IMClient.SendReceipt, to user: String) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "sent"), ("id", .string(receipt.messageID)), ("to", .string(user))]
            if let time = receipt.serverTime { fields.append(("server_time", .number(time))) }
            line(fields)
        } else {
            line("sent \(receipt.messageID) to \(user) (server time \(receipt.serverTime.map(Self.time) ?? "unknown"))")
        }
    }

    func token(_ token: String) {
        if json { line([("type", "token"), ("token", .string(token))]) } else { line(token) }
    }

    /// `imcli pub`: the gateway ACKed the publish.
    func published(topic: String, bytes: Int, qos: IMQoS, retain: Bool) {
        if json {
            line([("type", "published"), ("topic", .string(topic)), ("bytes", .number(UInt64(bytes))),
                  ("qos", .number(UInt64(qos.rawValue))), ("retain", .bool(retain))])
        } else {
            line("published \(bytes) bytes on \(topic) (QoS \(qos.rawValue)\(retain ? ", retained" : ""))")
        }
    }

    /// One filter of `imcli sub`, granted (a status note) or refused (an error); `root` is
    /// the pub/sub space, for the hint.
    func subscription(_ result: SubscriptionResult, root: String) {
        switch result.outcome {
        case .granted(let qos):
            if json { line([("type", "subscribed"), ("filter", .string(result.filter)), ("qos", .number(UInt64(qos.rawValue)))]) }
            status("subscribed to \(result.filter) (QoS \(qos.rawValue))")
        case .refused(let code):
            // The gateway's reason (the broker's words) says more than the hint.
            refused(("filter", result.filter), code, result.reason, hint: result.reason == nil ? Self.topicHint(code, root: root, filter: true) : nil)
        }
    }

    /// `imcli location watch`: the watch of `user` was made (a JSON line; people get one
    /// status line for all).
    func watching(_ user: String) {
        if json { line([("type", "watching"), ("user", .string(user))]) }
    }

    /// A request the gateway refused for one item (a filter, a user); the command goes on
    /// with the others.
    func refused(_ item: (key: String, value: String), _ code: IMErrorCode, _ message: String?, hint: String? = nil) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "refused"), (item.key, .string(item.value)), ("code", .number(UInt64(code.rawValue)))]
            if let name = code.name { fields.append(("name", .string(name))) }
            if let message { fields.append(("message", .string(message))) }
            line(fields)
        }
        status("error: \(item.value) refused: \(Self.describe(code, message))\(hint.map { " (\($0))" } ?? "")")
    }

    /// `imcli location share` is sharing.
    func sharing(as session: IMClient.Session, with audience: [String], seconds: Int, from source: String) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "sharing"), ("user", .string(session.userID))]
            if let device = session.deviceID { fields.append(("device", .string(device))) }
            fields += [("with", .array(audience.map { .string($0) })), ("for", .number(UInt64(seconds)))]
            line(fields)
        }
        status("\(session.userID)/\(session.deviceID ?? "default") shares \(source) with \(audience.joined(separator: ", ")) for \(Self.seconds(Double(seconds))) (Ctrl-C to stop)")
    }

    /// The hint for a refused topic (`filter` false) or filter in the pub/sub space `root`.
    static func topicHint(_ code: IMErrorCode, root: String, filter: Bool) -> String? {
        switch code {
        case .invalidTopic where filter: "filters must stay inside \(root)"
        case .invalidTopic: "topics must be inside \(root), without + or #"
        case .forbidden: "the gateway's pubsub policy does not allow it"
        case .qosNotSupported: "above the gateway's pubsub.max_qos: try a lower --qos"
        default: nil
        }
    }

    // MARK: Failures and status

    func failure(_ failure: CLIFailure) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "failed"), ("reason", .string(failure.kind)), ("message", .string(failure.message))]
            if let code = failure.code {
                fields.append(("code", .number(UInt64(code.rawValue))))
                if let name = code.name { fields.append(("name", .string(name))) }
            }
            line(fields)
        }
        status("error: \(failure.message)")
    }

    /// A note for the person at the terminal, on stderr.
    func status(_ text: String) {
        FileHandle.standardError.write(Data("imcli: \(text)\n".utf8))
    }

    // MARK: Formatting

    /// One line to stdout, written at once (no buffering: a pipe sees it immediately).
    func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// One JSON object, its fields in the order given.
    func line(_ fields: [(String, JSONValue)]) {
        line("{" + fields.map { "\(JSONValue.string($0.0).rendered):\($0.1.rendered)" }.joined(separator: ",") + "}")
    }

    /// Unix milliseconds as ISO 8601 UTC with milliseconds.
    static func time(_ milliseconds: UInt64) -> String {
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        return Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    /// A duration in seconds, for people: `1.5`.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func contentName(_ tag: IMTag) -> String {
        switch tag {
        case .text: "text"
        case .image: "image"
        case .fileContent: "file"
        case .voice: "voice"
        case .video: "video"
        case .locationCard: "location_card"
        case .custom: "custom"
        default: "content"
        }
    }
}
