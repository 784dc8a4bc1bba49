import IMArchive
import IMWire
import NIOCore

/// History, the conversation list and read markers (PROTOCOL.md 6.15-6.17): answered from the
/// archive on the request lane.
extension DeviceRequests {
    /// What a page may take of the body limit: room for the page's own items.
    static let pageOverhead = 256

    /// The archive, or a negative ACK UNKNOWN_OPERATION (a gateway without one keeps no history).
    private func archive(_ header: IMFrameHeader) -> MessageArchive? {
        guard let archive = context.archive else {
            reply(Ack.refusing(sequence: header.sequence, code: .unknownOperation, message: "this gateway keeps no message archive (archive.store: none)"), to: header)
            return nil
        }
        return archive
    }

    /// A LIMIT checked against the maximum, or `nil` after a negative ACK BAD_REQUEST.
    private func limit(_ limit: UInt16?, _ header: IMFrameHeader) -> Int? {
        let value = limit ?? HistoryQuery.defaultLimit
        guard (1...HistoryQuery.maxLimit).contains(value) else {
            reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: "LIMIT must be 1-\(HistoryQuery.maxLimit), not \(value)"), to: header)
            return nil
        }
        return Int(value)
    }

    /// The conversation as the archive names it, after checking that the user may read it: a
    /// valid user id, or a group the user is a member of (negative ACK INVALID_USER_ID or
    /// FORBIDDEN otherwise).
    private func conversation(_ conversation: IMConversation, _ header: IMFrameHeader) async throws -> Conversation? {
        switch conversation {
        case .user(let id):
            try IMIdentifier.validate(id, kind: .user)
            return .user(id)
        case .group(let id):
            try IMIdentifier.validate(id, kind: .group)
            guard try await context.groups.members(of: id)[session.user] != nil else {
                reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "\(session.user) is not a member of \(id)"), to: header)
                return nil
            }
            return .group(id)
        }
    }

    /// A stored entry as a record of a page: the DELIVERY items the user's device would have
    /// got (CARBON for what the user sent), or `nil` for one that cannot be read.
    private func record(_ entry: StoredEntry) -> ChatDelivery? {
        guard var delivery = ConnectionStateMachine.replay(entry, to: session.user) else { return nil }
        delivery.archived = false
        return delivery
    }

    func history(_ query: HistoryQuery, header: IMFrameHeader) async throws {
        guard let archive = archive(header), let limit = limit(query.limit, header),
              let conversation = try await conversation(query.conversation, header)
        else { return }
        let position: HistoryPosition = switch query.position {
        case .latest: .latest
        case .before(let offset): .before(offset)
        case .after(let offset): .after(offset)
        }
        let page = try await archive.history(stream: session.user, conversation: conversation, position: position, limit: limit)
        // Cut to the body limit: the newest of a backward page, the oldest of a forward one,
        // so that the next page goes on from where this one ends.
        var records = page.entries.compactMap(record)
        var complete = page.complete
        let budget = context.configuration.limits.maxBodyLength - Self.pageOverhead
        var size = 0
        var kept = 0
        let ordered: [ChatDelivery] = if case .after = query.position { records } else { records.reversed() }
        for delivery in ordered {
            size += Self.encodedSize(delivery)
            guard size <= budget else { break }
            kept += 1
        }
        if kept < records.count {
            complete = false
            records = if case .after = query.position { Array(records.prefix(kept)) } else { Array(records.suffix(kept)) }
        }
        mailbox.post(.answered(
            .historyPage(HistoryAnswer(refSequence: header.sequence, epoch: archive.epoch.rawValue, conversation: query.conversation,
                                       complete: complete, messages: records)),
            sessionID: header.sessionID))
    }

    func conversations(_ query: ConversationsQuery, header: IMFrameHeader) async throws {
        guard let archive = archive(header), let limit = limit(query.limit, header) else { return }
        let page = try await archive.conversations(user: session.user, before: query.before, limit: limit)
        var lines: [ConversationsAnswer.Line] = []
        var complete = page.complete
        var size = 0
        let budget = context.configuration.limits.maxBodyLength - Self.pageOverhead
        for summary in page.conversations {
            let conversation: IMConversation = switch summary.conversation {
            case .user(let id): .user(id)
            case .group(let id): .group(id)
            }
            let line = ConversationsAnswer.Line(
                conversation: conversation, lastOffset: summary.lastOffset, lastTime: summary.lastTime, readThrough: summary.readThrough,
                unread: UInt32(clamping: summary.unread), last: summary.last.flatMap(record))
            size += 64 + (line.last.map(Self.encodedSize) ?? 0)
            guard size <= budget else {
                complete = false
                break
            }
            lines.append(line)
        }
        mailbox.post(.answered(
            .conversationList(ConversationsAnswer(refSequence: header.sequence, epoch: archive.epoch.rawValue, complete: complete, lines: lines)),
            sessionID: header.sessionID))
    }

    func readMarker(_ marker: ReadMarkerUpdate, header: IMFrameHeader) async throws {
        guard let archive = archive(header), let conversation = try await conversation(marker.conversation, header) else { return }
        switch try await archive.markRead(user: session.user, conversation: conversation, through: marker.readThrough) {
        case .unknownConversation:
            reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: "no message in the conversation with \(conversation) to mark read"), to: header)
        case .pastEnd(let last):
            reply(Ack.refusing(sequence: header.sequence, code: .badRequest,
                               message: "READ_THROUGH \(marker.readThrough) is past the newest message of the conversation (\(last))"), to: header)
        case .marked(let stored):
            reply(Ack(sequence: header.sequence, readThrough: stored.readThrough, unread: UInt32(clamping: stored.unread)), to: header)
            // The user's other online devices, at once (a marker that did not move tells nobody).
            guard stored.readThrough == marker.readThrough else { return }
            let bytes = PayloadCodec.encode(ReadMarkerPayload(device: session.device, marker: stored, ts: unixMilliseconds()))
            let topic = context.topics.signal(user: session.user)
            do {
                try await session.publish(OutgoingPublish(
                    topic: topic, payload: bytes, qos: .atMostOnce,
                    properties: .gateway(sender: session.user, expiry: 60, tag: context.authenticator.tag(topic: topic, payload: bytes))))
            } catch {
                logger.notice("read marker not told to the other devices", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Deletes one of the user's messages for everyone (PROTOCOL.md 6.18): stored as
    /// tombstones first, then each published to its stream's inbox with its offset (a repeat
    /// publishes the first deletion's again), then the ACK. Like a stored chat, the stored
    /// tombstones go out whatever happens to the device's session (``ChatAcceptance``).
    func delete(_ request: MessageDelete, header: IMFrameHeader) async throws {
        guard let archive = archive(header) else { return }
        let me = session.user
        if let from = request.from, from != me {
            return reply(Ack.refusing(sequence: header.sequence, code: .forbidden,
                                      message: "only its sender can delete a message: \(request.messageID) is \(from)'s"), to: header)
        }
        let id = request.messageID
        let now = unixMilliseconds()
        guard let deleted = try await archive.deleteMessage(sender: me, messageID: id, at: now, origin: session.device, tombstone: { body in
            ChatPayload.tombstone(of: body, sender: me, messageID: id, at: now)
        }) else {
            return reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: "no message \(id) of \(me) is stored"), to: header)
        }
        guard !deleted.tombstones.isEmpty, let stored = try? PayloadCodec.decode(ChatPayload.self, from: deleted.body) else {
            return reply(Ack(sequence: header.sequence, messageID: id, serverTime: deleted.deletedAt), to: header)
        }
        let epoch = archive.epoch.rawValue
        var publishes: [OutgoingPublish] = []
        for copy in deleted.tombstones {
            var payload = stored.copy(for: copy.stream, own: copy.origin != nil)
            payload.offset = copy.offset
            payload.epoch = epoch
            let topic = context.topics.inbox(user: copy.stream)
            let bytes = PayloadCodec.encode(payload)
            publishes.append(OutgoingPublish(
                topic: topic, payload: bytes, qos: .atLeastOnce,
                properties: .gateway(sender: me, messageID: id, tag: context.authenticator.tag(topic: topic, payload: bytes))))
            // This device deleted it: its own tombstone is done.
            if copy.origin == session.device { mailbox.post(.ownStored([copy.offset])) }
        }
        if let failure = await acceptance.publish(publishes, of: id, window: brokerFit.publishWindow, via: session, logger: logger) {
            return reply(Ack.refusing(sequence: header.sequence, code: .brokerUnavailable, message: failure), to: header)
        }
        reply(Ack(sequence: header.sequence, messageID: id, serverTime: deleted.deletedAt), to: header)
    }

    /// How many bytes a record of `delivery` takes in a page.
    static func encodedSize(_ delivery: ChatDelivery) -> Int {
        var writer = TLVWriter(allocator: ByteBufferAllocator(), capacity: 256)
        writer.writeContainer { delivery.write(to: &$0) }
        return writer.buffer.readableBytes
    }
}
