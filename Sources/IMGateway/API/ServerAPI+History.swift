import Foundation
import IMArchive
import IMGatewayAPI
import IMWire
import Logging

/// History, conversation lists and erasure through the server API (docs/openapi.yaml): the
/// archive read and written for the app's backend, which owns who may see what.
extension ServerAPI {
    func getDirectHistory(_ input: Operations.GetDirectHistory.Input) async throws -> Operations.GetDirectHistory.Output {
        let (user, peer) = (input.path.user, input.path.peer)
        switch Self.refusal(of: [(user, .user), (peer, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        switch await history(of: user, in: .user(peer), before: input.query.before, after: input.query.after, limit: input.query.limit) {
        case .page(let page): return .ok(.init(body: .json(page)))
        case .badRequest(let error): return .badRequest(.init(body: .json(error)))
        case .noArchive(let error): return .notImplemented(.init(body: .json(error)))
        case .unavailable(let error): return .serviceUnavailable(.init(body: .json(error)))
        }
    }

    func getGroupHistory(_ input: Operations.GetGroupHistory.Input) async throws -> Operations.GetGroupHistory.Output {
        let (user, group) = (input.path.user, input.path.group)
        switch Self.refusal(of: [(user, .user), (group, .group)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        switch await history(of: user, in: .group(group), before: input.query.before, after: input.query.after, limit: input.query.limit) {
        case .page(let page): return .ok(.init(body: .json(page)))
        case .badRequest(let error): return .badRequest(.init(body: .json(error)))
        case .noArchive(let error): return .notImplemented(.init(body: .json(error)))
        case .unavailable(let error): return .serviceUnavailable(.init(body: .json(error)))
        }
    }

    /// What a history request comes to.
    private enum HistoryReply {
        case page(Components.Schemas.HistoryPage)
        case badRequest(Components.Schemas.ErrorResponse)
        case noArchive(Components.Schemas.ErrorResponse)
        case unavailable(Components.Schemas.ErrorResponse)
    }

    /// A page of `conversation` in `user`'s stream: the newest, before an offset, after one,
    /// or after one and short of another.
    private func history(of user: String, in conversation: Conversation, before: Int64?, after: Int64?, limit: Int?) async -> HistoryReply {
        guard let archive = context.archive else { return .noArchive(Self.noArchive) }
        guard let limit = Self.limit(limit) else { return .badRequest(Self.error("bad_request", "limit must be 1-200, not \(limit ?? 0)")) }
        guard (before ?? 0) >= 0, (after ?? 0) >= 0 else { return .badRequest(Self.error("bad_request", "before and after are offsets (0 or more)")) }
        let position: HistoryPosition = after.map { .after(UInt64($0)) } ?? before.map { .before(UInt64($0)) } ?? .latest
        do {
            let page = try await archive.history(stream: user, conversation: conversation, position: position, limit: limit)
            var entries = page.entries
            var complete = page.complete
            if let after, let before {
                // Forward from `after`, short of `before`: what reaches it is cut, and nothing
                // is left in between.
                guard before > after else { return .page(.init(messages: [], complete: true, epoch: Int64(bitPattern: archive.epoch.rawValue))) }
                let kept = entries.prefix { $0.offset < UInt64(before) }
                if kept.count < entries.count { complete = true }
                entries = Array(kept)
            }
            return .page(.init(messages: entries.compactMap { Self.stored($0, for: user) }, complete: complete, epoch: Int64(bitPattern: archive.epoch.rawValue)))
        } catch {
            return .unavailable(archiveUnavailable("history of \(user)", error))
        }
    }

    func listConversations(_ input: Operations.ListConversations.Input) async throws -> Operations.ListConversations.Output {
        let user = input.path.user
        switch Self.refusal(of: [(user, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        guard let archive = context.archive else { return .notImplemented(.init(body: .json(Self.noArchive))) }
        guard let limit = Self.limit(input.query.limit) else {
            return .badRequest(.init(body: .json(Self.error("bad_request", "limit must be 1-200, not \(input.query.limit ?? 0)"))))
        }
        if let before = input.query.before, before < 0 {
            return .badRequest(.init(body: .json(Self.error("bad_request", "before is an offset (0 or more), not \(before)"))))
        }
        do {
            let page = try await archive.conversations(user: user, before: input.query.before.map { UInt64($0) }, limit: limit)
            let lines = page.conversations.map { line -> Components.Schemas.ConversationLine in
                var with: String?, group: String?
                switch line.conversation {
                case .user(let id): with = id
                case .group(let id): group = id
                }
                return .init(
                    with: with, group: group, lastOffset: Int64(clamping: line.lastOffset), lastTime: Int64(clamping: line.lastTime),
                    readThrough: Int64(clamping: line.readThrough), unread: line.unread, last: line.last.flatMap { Self.stored($0, for: user) })
            }
            return .ok(.init(body: .json(.init(conversations: lines, complete: page.complete))))
        } catch {
            return .serviceUnavailable(.init(body: .json(archiveUnavailable("conversations of \(user)", error))))
        }
    }

    func eraseUser(_ input: Operations.EraseUser.Input) async throws -> Operations.EraseUser.Output {
        let user = input.path.user
        switch Self.refusal(of: [(user, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        guard let archive = context.archive else { return .notImplemented(.init(body: .json(Self.noArchive))) }
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        do {
            let erased = try await archive.eraseUser(user, at: now) { body in
                ChatPayload.tombstone(of: body, sender: user, messageID: "", at: now)
            }
            context.logger.notice("user erased from the archive", metadata: [
                "user": "\(user)", "messages": "\(erased.messages)", "entries": "\(erased.entries)",
                "api_key": "\(APIKeyMiddleware.caller ?? "?")",
            ])
            return .ok(.init(body: .json(.init(user: user, messagesErased: erased.messages, entriesRemoved: erased.entries))))
        } catch {
            return .serviceUnavailable(.init(body: .json(archiveUnavailable("erase \(user)", error))))
        }
    }

    static var noArchive: Components.Schemas.ErrorResponse {
        error("no_archive", "this gateway keeps no message archive (archive.store: none)")
    }

    /// A LIMIT (default 50), or `nil` outside 1-200.
    static func limit(_ value: Int?) -> Int? {
        let limit = value ?? Int(HistoryQuery.defaultLimit)
        return (1...Int(HistoryQuery.maxLimit)).contains(limit) ? limit : nil
    }

    /// A stored entry as the API shows it, or `nil` for one that cannot be read.
    static func stored(_ entry: StoredEntry, for user: String) -> Components.Schemas.StoredMessage? {
        guard let payload = try? PayloadCodec.decode(ChatPayload.self, from: entry.body) else { return nil }
        let copy = payload.copy(for: user, own: entry.origin != nil)
        let deleted = copy.deleted != nil || copy.type == ChatPayload.deletedType
        let carbon = copy.carbon == true
        return .init(
            offset: Int64(clamping: entry.offset), id: copy.id, from: copy.from, to: carbon && copy.group == nil ? copy.to : nil,
            group: copy.group, carbon: carbon ? true : nil, serverTime: Int64(clamping: copy.deleted ?? copy.ts),
            _type: deleted ? ChatPayload.deletedType : copy.type, text: deleted ? nil : copy.text, data: deleted ? nil : copy.data, deleted: deleted)
    }

    private func archiveUnavailable(_ what: String, _ error: ArchiveError) -> Components.Schemas.ErrorResponse {
        context.logger.warning("API archive request failed", metadata: ["what": "\(what)", "error": "\(error)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
        return Self.error("store_unavailable", "the message archive cannot answer now: \(error)")
    }
}
