import Foundation
import IMClient

/// Prints results and events: human lines by default, one JSON object per line with
/// --json. Lines go to stdout, each written as it comes (not buffered); failures and
/// status notes go to stderr.
struct Output: Sendable {
    var json: Bool

    // MARK: Events and results

    func event(_ event: IMClient.Event) {
        switch event {
        case .message(let message):
            if json {
                var fields: [(String, JSONValue)] = [
                    ("type", "message"), ("from", .string(message.from)), ("id", .string(message.messageID)),
                ]
                if let text = message.text {
                    fields.append(("text", .string(text)))
                } else {
                    fields.append(("content_type", .string(Self.contentName(message.content.tag))))
                    fields.append(("content_base64", .string(Data(message.content.value.readableBytesView).base64EncodedString())))
                }
                fields += [("server_time", .number(message.serverTime)), ("resend", .bool(message.resend))]
                line(fields)
            } else if let text = message.text {
                line("\(message.from): \(text)")
            } else {
                line("\(message.from): [\(Self.contentName(message.content.tag)), \(message.content.value.readableBytes) bytes]")
            }
        case .receipt(let receipt):
            let kind = receipt.kind == .read ? "read" : "delivered"
            if json {
                line([("type", "receipt"), ("from", .string(receipt.from)), ("id", .string(receipt.messageID)),
                      ("kind", .string(kind)), ("server_time", .number(receipt.serverTime))])
            } else {
                line("[receipt] \(receipt.from) \(kind == "read" ? "read" : "received") \(receipt.messageID)")
            }
        case .presence(let presence):
            let status = presence.status == .online ? "online" : "offline"
            if json {
                var fields: [(String, JSONValue)] = [("type", "presence"), ("user", .string(presence.user))]
                if let device = presence.device { fields.append(("device", .string(device))) }
                fields.append(("status", .string(status)))
                if let lastSeen = presence.lastSeen { fields.append(("last_seen", .number(lastSeen))) }
                line(fields)
            } else {
                let who = presence.device.map { "\(presence.user)/\($0)" } ?? presence.user
                let seen = presence.lastSeen.map { " (last seen \(Self.time($0)))" } ?? ""
                line("[presence] \(who) \(status)\(seen)")
            }
        case .kicked(let code, let message):
            notice("kicked", code, message)
        case .error(let code, let message):
            notice("error", code, message)
        case .disconnected:
            if json { line([("type", "disconnected")]) } else { line("[disconnected] the gateway closed the connection") }
        }
    }

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

    private func notice(_ type: String, _ code: IMErrorCode, _ message: String?) {
        if json {
            var fields: [(String, JSONValue)] = [("type", .string(type)), ("code", .number(UInt64(code.rawValue)))]
            if let name = code.name { fields.append(("name", .string(name))) }
            if let message { fields.append(("message", .string(message))) }
            line(fields)
        } else {
            line("[\(type)] \(code)\(message.map { ": \($0)" } ?? "")")
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
    private func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    private func line(_ fields: [(String, JSONValue)]) {
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

/// A JSON value for one output line (keys keep their order).
enum JSONValue: Sendable, ExpressibleByStringLiteral {
    case string(String)
    case number(UInt64)
    case bool(Bool)

    init(stringLiteral value: String) { self = .string(value) }

    var rendered: String {
        switch self {
        case .number(let value): return "\(value)"
        case .bool(let value): return value ? "true" : "false"
        case .string(let value):
            var out = "\""
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20:
                    out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
    }
}
