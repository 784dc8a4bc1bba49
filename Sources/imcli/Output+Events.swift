import Foundation
import IMClient

// The client's events: data lines on stdout, connection notices on stderr (and as JSON lines
// with --json).
extension Output {
    func event(_ event: IMClient.Event) {
        switch event {
        case .message(let message): self.message(message)
        case .receipt(let receipt): self.receipt(receipt)
        case .presence(let presence): self.presence(presence)
        case .location(let location): self.location(location)
        case .publication(let publication): self.publication(publication)
        case .typing(let typing): self.typing(typing)
        case .readMarker(let marker): readMarker(marker)
        case .deleted(let deletion): deleted(deletion)
        case .kicked(let code, let message):
            notice([("type", "kicked")] + Self.codeFields(code, message), "kicked by the gateway: \(Self.describe(code, message))")
        case .error(let code, let message):
            notice([("type", "error")] + Self.codeFields(code, message), "error from the gateway: \(Self.describe(code, message))")
        case .reconnecting(let reconnecting):
            let delay = Self.seconds(reconnecting.delay)
            notice([("type", "reconnecting"), ("cause", .string(reconnecting.cause.description)),
                    ("attempt", .number(UInt64(reconnecting.attempt))), ("delay_ms", .number(UInt64(delay * 1000)))],
                   reconnecting.attempt == 0
                       ? "connection lost (\(reconnecting.cause)); reconnecting in \(String(format: "%.1f", delay)) s"
                       : "reconnect failed (\(reconnecting.cause)); attempt \(reconnecting.attempt + 1) in \(String(format: "%.1f", delay)) s")
        case .reconnected(let session):
            var fields: [(String, JSONValue)] = [("type", "reconnected"), ("user", .string(session.userID))]
            if let device = session.deviceID { fields.append(("device", .string(device))) }
            if let resumed = session.resumed { fields.append(("resumed", .bool(resumed))) }
            // With an archive, what the broker lost is caught up from it.
            let lost = session.resumed == false && session.syncStatus == nil
                ? " (a new session: what the broker held for this device is gone)" : ""
            notice(fields, "reconnected as \(Self.who(session.userID, session.deviceID))\(lost)")
        case .synced(let result):
            var fields: [(String, JSONValue)] = [
                ("type", "synced"), ("replayed", .number(UInt64(result.replayed))), ("epoch", .number(result.position.epoch)),
                ("offset", .number(result.position.offset)), ("status", .string(result.status.description)),
            ]
            if result.status != .continued { fields.append(("note", .string(Self.syncNote(result.status)))) }
            let note = result.status == .continued ? "" : " (\(Self.syncNote(result.status)))"
            notice(fields, "caught up: \(result.replayed) message\(result.replayed == 1 ? "" : "s") from the archive, at \(result.position.offset)\(note)")
        case .disconnected:
            notice([("type", "disconnected")], "the session ended; not reconnecting")
        }
    }

    /// Whether `event` is about the connection (shown by every command) rather than data.
    static func isNotice(_ event: IMClient.Event) -> Bool {
        switch event {
        case .kicked, .error, .reconnecting, .reconnected, .disconnected: true
        // A catch-up is news when it brought something, or could not continue.
        case .synced(let result): result.replayed > 0 || result.status != .continued
        case .message, .receipt, .presence, .location, .publication, .typing, .readMarker, .deleted: false
        }
    }

    /// What a SYNC_STATUS other than `continued` means for the user.
    static func syncNote(_ status: IMSyncStatus) -> String {
        switch status {
        case .new: "a device the gateway did not know: from now on"
        case .epochChanged: "the archive was replaced: what this device had is not in it"
        case .expired: "some messages were older than the archive keeps"
        case .refused: "the position given was past the stream's end"
        case .unavailable: "the archive could not be read"
        default: status.description
        }
    }

    /// A message of a conversation's history: as a received one, with its offset, or
    /// [deleted].
    func stored(_ message: IMClient.Message) {
        guard message.isDeleted else {
            if json {
                self.message(message)
            } else {
                let conversation = message.group.map { " in \($0)" } ?? (message.isCarbon ? message.to.map { " to \($0)" } ?? "" : "")
                let who = (message.isCarbon ? "you" : message.from) + conversation
                let body = message.text ?? "[\(Self.contentName(message.content.tag)), \(message.content.value.readableBytes) bytes]"
                line("\(message.streamOffset.map { "\($0) " } ?? "")\(who): \(body)")
            }
            return
        }
        if json {
            var fields: [(String, JSONValue)] = [("type", "deleted"), ("from", .string(message.from)), ("id", .string(message.messageID))]
            if let group = message.group { fields.append(("group", .string(group))) }
            if let to = message.to { fields.append(("to", .string(to))) }
            fields.append(("deleted_at", .number(message.serverTime)))
            if let offset = message.streamOffset { fields.append(("offset", .number(offset))) }
            line(fields)
        } else {
            line("\(message.streamOffset.map { "\($0) " } ?? "")\(message.isCarbon ? "you" : message.from): [deleted]")
        }
    }

    /// One line of the conversation list.
    func conversation(_ line: IMClient.ConversationLine) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "conversation")]
            switch line.conversation {
            case .user(let id): fields.append(("with", .string(id)))
            case .group(let id): fields.append(("group", .string(id)))
            }
            fields += [("unread", .number(UInt64(line.unread))), ("read_through", .number(line.readThrough)),
                       ("last_offset", .number(line.lastOffset)), ("last_time", .number(line.lastTime))]
            if let last = line.last {
                fields.append(("last_from", .string(last.from)))
                fields.append(("last_id", .string(last.messageID)))
                if last.isDeleted { fields.append(("last_deleted", .bool(true))) } else if let text = last.text { fields.append(("last_text", .string(text))) }
            }
            self.line(fields)
        } else {
            let name: String = switch line.conversation {
            case .user(let id): id
            case .group(let id): "\(id) (group)"
            }
            let last = line.last.map { message in
                let body = message.isDeleted ? "[deleted]" : message.text ?? "[\(Self.contentName(message.content.tag))]"
                return "\(message.isCarbon ? "you" : message.from): \(body)"
            } ?? ""
            self.line("\(name)\(line.unread > 0 ? " (\(line.unread) unread)" : "") \(last)")
        }
    }

    private func message(_ message: IMClient.Message) {
        if json {
            var fields: [(String, JSONValue)] = [
                ("type", "message"), ("from", .string(message.from)), ("id", .string(message.messageID)),
            ]
            if let group = message.group { fields.append(("group", .string(group))) }
            if let to = message.to { fields.append(("to", .string(to))) }
            if message.isCarbon { fields.append(("carbon", .bool(true))) }
            if let text = message.text {
                fields.append(("text", .string(text)))
            } else {
                fields.append(("content_type", .string(Self.contentName(message.content.tag))))
                fields.append(("content_base64", .string(Data(message.content.value.readableBytesView).base64EncodedString())))
            }
            fields += [("server_time", .number(message.serverTime)), ("resend", .bool(message.resend))]
            if let offset = message.streamOffset { fields.append(("offset", .number(offset))) }
            if message.isArchived { fields.append(("caught_up", .bool(true))) }
            line(fields)
        } else {
            // "alice: hi", "alice in team: hi", "you (another device) to bob: hi".
            let conversation = message.group.map { " in \($0)" } ?? (message.isCarbon ? message.to.map { " to \($0)" } ?? "" : "")
            let who = (message.isCarbon ? "you (another device)" : message.from) + conversation
            let body = message.text ?? "[\(Self.contentName(message.content.tag)), \(message.content.value.readableBytes) bytes]"
            line("\(who): \(body)\(message.isArchived ? " (caught up)" : "")")
        }
    }

    /// `[typing] alice is typing`, `[typing] alice in team stopped`.
    /// A message its sender deleted.
    func deleted(_ deletion: IMClient.Deletion) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "deleted"), ("from", .string(deletion.from)), ("id", .string(deletion.messageID))]
            if let group = deletion.group { fields.append(("group", .string(group))) }
            if let to = deletion.to { fields.append(("to", .string(to))) }
            fields.append(("deleted_at", .number(deletion.deletedAt)))
            line(fields)
        } else {
            line("[deleted] \(deletion.from)'s message \(deletion.messageID)\(deletion.group.map { " in \($0)" } ?? "")")
        }
    }

    /// A read marker another device of the user moved.
    func readMarker(_ marker: IMClient.ReadMarker) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "read_marker")]
            switch marker.conversation {
            case .user(let id): fields.append(("to", .string(id)))
            case .group(let id): fields.append(("group", .string(id)))
            }
            fields += [("read_through", .number(marker.readThrough)), ("unread", .number(UInt64(marker.unread)))]
            line(fields)
        } else {
            line("[read] \(marker.conversation) read through \(marker.readThrough), \(marker.unread) unread")
        }
    }

    private func typing(_ typing: IMClient.TypingUpdate) {
        let state = Self.typingNames[Int(typing.state.rawValue)]
        if json {
            var fields: [(String, JSONValue)] = [("type", "typing"), ("from", .string(typing.from))]
            if let group = typing.group { fields.append(("group", .string(group))) }
            fields.append(("state", .string(state)))
            line(fields)
        } else {
            let words = ["stopped typing", "is typing", "is recording audio", "is away"][Int(typing.state.rawValue)]
            line("[typing] \(typing.from)\(typing.group.map { " in \($0)" } ?? "") \(words)")
        }
    }

    /// The names of ``TypingState`` in JSON lines and on the command line.
    static let typingNames = ["stopped", "typing", "recording", "away"]

    private func receipt(_ receipt: IMClient.Receipt) {
        let kind = receipt.kind == .read ? "read" : "delivered"
        if json {
            line([("type", "receipt"), ("from", .string(receipt.from)), ("id", .string(receipt.messageID)),
                  ("kind", .string(kind)), ("server_time", .number(receipt.serverTime))])
        } else {
            line("[receipt] \(receipt.from) \(kind == "read" ? "read" : "received") \(receipt.messageID)")
        }
    }

    private func presence(_ presence: IMClient.Presence) {
        let status = presence.status == .online ? "online" : "offline"
        if json {
            var fields: [(String, JSONValue)] = [("type", "presence"), ("user", .string(presence.user))]
            if let device = presence.device { fields.append(("device", .string(device))) }
            fields.append(("status", .string(status)))
            if let lastSeen = presence.lastSeen { fields.append(("last_seen", .number(lastSeen))) }
            line(fields)
        } else {
            let seen = presence.lastSeen.map { " (last seen \(Self.time($0)))" } ?? ""
            line("[presence] \(Self.who(presence.user, presence.device)) \(status)\(seen)")
        }
    }

    /// `[location] alice/phone 52.52,13.405`; JSON with the OwnTracks fields present (tst in
    /// Unix seconds, as on the wire).
    private func location(_ event: IMClient.Location) {
        let fix = event.location
        if json {
            var fields: [(String, JSONValue)] = [("type", "location"), ("user", .string(event.user))]
            if let device = event.device { fields.append(("device", .string(device))) }
            fields += [("lat", .double(fix.lat)), ("lon", .double(fix.lon)), ("tst", .number(fix.tst))]
            if let acc = fix.acc { fields.append(("acc", .number(UInt64(acc)))) }
            if let alt = fix.alt { fields.append(("alt", .integer(Int64(alt)))) }
            if let vel = fix.vel { fields.append(("vel", .number(UInt64(vel)))) }
            if let cog = fix.cog { fields.append(("cog", .number(UInt64(cog)))) }
            if let batt = fix.batt { fields.append(("batt", .number(UInt64(batt)))) }
            line(fields)
        } else {
            let accuracy = fix.acc.map { " ±\($0) m" } ?? ""
            line("[location] \(Self.who(event.user, event.device)) \(fix.lat),\(fix.lon)\(accuracy)")
        }
    }

    /// `im/t/news hello` (as `mosquitto_sub -v` prints it); JSON with `text` for UTF-8
    /// payloads, else `payload_base64`.
    private func publication(_ publication: IMClient.Publication) {
        if json {
            var fields: [(String, JSONValue)] = [("type", "publication"), ("topic", .string(publication.topic))]
            if let text = publication.text {
                fields.append(("text", .string(text)))
            } else {
                fields.append(("payload_base64", .string(Data(publication.payload).base64EncodedString())))
            }
            fields += [("qos", .number(UInt64(publication.qos.rawValue))), ("retain", .bool(publication.retain))]
            if let time = publication.serverTime { fields.append(("server_time", .number(time))) }
            line(fields)
        } else {
            line("\(publication.topic) \(publication.text ?? "[\(publication.payload.count) bytes]")")
        }
    }

    /// A connection notice: on stderr, and with --json as a JSON line on stdout too.
    private func notice(_ fields: [(String, JSONValue)], _ text: String) {
        if json { line(fields) }
        status(text)
    }

    private static func codeFields(_ code: IMErrorCode, _ message: String?) -> [(String, JSONValue)] {
        var fields: [(String, JSONValue)] = [("code", .number(UInt64(code.rawValue)))]
        if let name = code.name { fields.append(("name", .string(name))) }
        if let message { fields.append(("message", .string(message))) }
        return fields
    }

    /// `NAME (code): message`.
    static func describe(_ code: IMErrorCode, _ message: String?) -> String {
        guard let message, !message.isEmpty else { return "\(code)" }
        return "\(code): \(message)"
    }

    /// `user/device`, or `user` when the device is unknown.
    static func who(_ user: String, _ device: String?) -> String {
        device.map { "\(user)/\($0)" } ?? user
    }
}
