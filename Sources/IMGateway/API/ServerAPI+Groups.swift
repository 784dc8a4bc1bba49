import IMGatewayAPI
import IMWire
import Logging
import Mosquitto

/// The server API's group operations (docs/openapi.yaml). Membership is recorded in the message
/// archive, if there is one (where it survives the broker's state), then retained on the
/// broker, one message per member (`{prefix}/g/{group}/members/{user}`, tagged), so concurrent
/// changes through different gateways do not overwrite each other and every gateway following
/// the group hears of them; this gateway reads it through its ``GroupDirectory``, like its
/// devices' group chats.
extension ServerAPI {
    private var maxMembers: Int { context.configuration.groups.maxMembers }

    func createGroup(_ input: Operations.CreateGroup.Input) async throws -> Operations.CreateGroup.Output {
        guard case .json(let body) = input.body else { return .badRequest(.init(body: .json(Self.error("bad_request", "the body must be JSON")))) }
        let group = input.path.group
        // The schema's bounds (the generated code does not check them).
        guard (1...100_000).contains(body.members.count) else {
            return .badRequest(.init(body: .json(Self.error("bad_request", "members must list 1 to 100000 users"))))
        }
        switch Self.refusal(of: [(group, .group)] + body.members.map { ($0, .user) }) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        let members = Set(body.members).sorted()
        guard members.count <= maxMembers else {
            return .conflict(.init(body: .json(Self.error("limit_reached", "a group has at most \(maxMembers) members"))))
        }
        do {
            guard try await context.groups.members(of: group).isEmpty else {
                return .conflict(.init(body: .json(Self.error("conflict", "group \(group) exists; add members one by one"))))
            }
            let since = unixMilliseconds()
            try await context.archive?.recordGroupMembers(group, Dictionary(uniqueKeysWithValues: members.map { ($0, since) }))
            try await OutgoingPublish.publishAll(members.map { membership(group: group, user: $0, since: since) }, window: 64) {
                try await broker.publish($0)
            }
            for user in members { context.groups.apply(group: group, user: user, since: since) }
            log("API group created", ["group": "\(group)", "members": "\(members.count)"])
            return .created(.init(body: .json(.init(group: group, members: members.map { .init(user: $0, since: Int64(since)) }))))
        } catch {
            return .serviceUnavailable(.init(body: .json(unavailable("group \(group)", error))))
        }
    }

    func listGroupMembers(_ input: Operations.ListGroupMembers.Input) async throws -> Operations.ListGroupMembers.Output {
        let group = input.path.group
        switch Self.refusal(of: [(group, .group)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        do {
            let members = try await context.groups.members(of: group)
            return .ok(.init(body: .json(.init(
                group: group, members: members.sorted { $0.key < $1.key }.map { .init(user: $0.key, since: Int64($0.value)) }))))
        } catch {
            return .serviceUnavailable(.init(body: .json(unavailable("group \(group)", error))))
        }
    }

    func addGroupMember(_ input: Operations.AddGroupMember.Input) async throws -> Operations.AddGroupMember.Output {
        let (group, user) = (input.path.group, input.path.user)
        switch Self.refusal(of: [(group, .group), (user, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        do {
            let members = try await context.groups.members(of: group)
            if let since = members[user] {
                return .ok(.init(body: .json(.init(group: group, user: user, since: Int64(since), added: false))))
            }
            guard members.count < maxMembers else {
                return .conflict(.init(body: .json(Self.error("limit_reached", "group \(group) has \(maxMembers) members, the most it may"))))
            }
            let since = unixMilliseconds()
            try await context.archive?.recordGroupMembers(group, [user: since])
            try await broker.publish(membership(group: group, user: user, since: since))
            context.groups.apply(group: group, user: user, since: since)
            log("API group member added", ["group": "\(group)", "user": "\(user)"])
            return .ok(.init(body: .json(.init(group: group, user: user, since: Int64(since), added: true))))
        } catch {
            return .serviceUnavailable(.init(body: .json(unavailable("group \(group)", error))))
        }
    }

    func removeGroupMember(_ input: Operations.RemoveGroupMember.Input) async throws -> Operations.RemoveGroupMember.Output {
        let (group, user) = (input.path.group, input.path.user)
        switch Self.refusal(of: [(group, .group), (user, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        do {
            guard try await context.groups.members(of: group)[user] != nil else {
                return .ok(.init(body: .json(.init(group: group, user: user, removed: false))))
            }
            try await context.archive?.recordGroupMembers(group, [user: nil])
            // An empty retained message clears the membership.
            try await broker.publish(OutgoingPublish(topic: context.topics.groupMember(group: group, user: user), payload: [], qos: .atLeastOnce, retain: true))
            context.groups.apply(group: group, user: user, since: nil)
            log("API group member removed", ["group": "\(group)", "user": "\(user)"])
            return .ok(.init(body: .json(.init(group: group, user: user, removed: true))))
        } catch {
            return .serviceUnavailable(.init(body: .json(unavailable("group \(group)", error))))
        }
    }

    func sendGroupMessage(_ input: Operations.SendGroupMessage.Input) async throws -> Operations.SendGroupMessage.Output {
        guard case .json(let body) = input.body else { return .badRequest(.init(body: .json(Self.error("bad_request", "the body must be JSON")))) }
        let group = input.path.group
        let from: String
        switch sender(of: body, to: (group, .group)) {
        case .success(let sender): from = sender
        case .failure(.noSuchUser(let error)): return .notFound(.init(body: .json(error)))
        case .failure(.invalid(let error)): return .badRequest(.init(body: .json(error)))
        }
        let members: [String: UInt64]
        do {
            members = try await context.groups.members(of: group)
        } catch {
            return .serviceUnavailable(.init(body: .json(unavailable("group \(group)", error))))
        }
        guard !members.isEmpty else { return .notFound(.init(body: .json(Self.error("no_such_group", "group \(group) has no members")))) }
        if body.from != nil && members[from] == nil {
            return .forbidden(.init(body: .json(Self.error("forbidden", "\(from) is not a member of \(group)"))))
        }
        let chat = ChatSend(group: group, messageID: body.id, content: .text(body.text))
        let sent: Sent
        switch await send(chat, from: from, asUser: body.from != nil, to: members.keys.filter { $0 != from }.sorted()) {
        case .success(let outcome): sent = outcome
        case .failure(.reused):
            return .conflict(.init(body: .json(Self.error("conflict", "message id \(body.id) of \(from) was used for another message"))))
        case .failure(.unavailable(let code, let message)):
            return .serviceUnavailable(.init(body: .json(Self.error(code, message))))
        }
        let (serverTime, isRepeat, copies) = (sent.serverTime, sent.isRepeat, sent.isRepeat ? 0 : sent.copies)
        log("API group message", ["group": "\(group)", "from": "\(from)", "id": "\(body.id)", "copies": "\(copies)"])
        return .accepted(.init(body: .json(.init(
            id: body.id, group: group, from: from, serverTime: Int64(serverTime), _repeat: isRepeat, members: copies))))
    }

    /// The retained, tagged membership of `user` in `group`.
    private func membership(group: String, user: String, since: UInt64) -> OutgoingPublish {
        let topic = context.topics.groupMember(group: group, user: user)
        let payload = PayloadCodec.encode(GroupMemberPayload(group: group, user: user, since: since))
        return OutgoingPublish(
            topic: topic, payload: payload, qos: .atLeastOnce, retain: true,
            properties: .gateway(sender: user, tag: context.authenticator.tag(topic: topic, payload: payload)))
    }

    private func unavailable(_ what: String, _ error: any Error) -> Components.Schemas.ErrorResponse {
        context.logger.warning("API group request failed", metadata: ["what": "\(what)", "error": "\(error)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
        return Self.error("broker_unavailable", "the broker cannot be reached: \(error)")
    }

    private func log(_ message: String, _ metadata: [String: String]) {
        var all = metadata.mapValues { "\($0)" } as [String: Logger.MetadataValue]
        all["api_key"] = "\(APIKeyMiddleware.caller ?? "?")"
        context.logger.info("\(message)", metadata: all)
    }
}
