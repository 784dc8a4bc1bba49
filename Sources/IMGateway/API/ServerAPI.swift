import Foundation
import Hummingbird
import IMArchive
import IMGatewayAPI
import IMWeb
import IMWire
import Logging
import Mosquitto
import OpenAPIHummingbird
import OpenAPIRuntime

/// The server API's operations (docs/openapi.yaml) on this gateway: what they publish goes
/// through ``ControlClient``, what they read comes from the broker, so any gateway answers alike.
struct ServerAPI: APIProtocol {
    let context: GatewayContext
    let broker: ControlClient
    /// Where the messages it sends go.
    let acceptance: ChatAcceptance

    /// The longest text of a message (docs/openapi.yaml: `maxLength`, in characters).
    static let maxTextLength = 65_536

    /// The sender of a message request to `recipient` (a user or a group), or why it is refused:
    /// an id no one can have (404), or an invalid id, message id or text (400).
    func sender(of body: Components.Schemas.SendMessageRequest, to recipient: (String, IMIdentifier.Kind)) -> Result<String, IDRefusal> {
        let from = body.from ?? context.configuration.api.systemSender
        if let refusal = Self.refusal(of: [recipient, (from, .user)]) { return .failure(refusal) }
        guard IMIdentifier.isValidMessageID(body.id) else { return .failure(.invalid(Self.error("bad_request", IMIdentifier.messageIDRule))) }
        guard body.text.unicodeScalars.count <= Self.maxTextLength else {
            return .failure(.invalid(Self.error("bad_request", "text is longer than \(Self.maxTextLength) characters")))
        }
        return .success(from)
    }

    func sendMessage(_ input: Operations.SendMessage.Input) async throws -> Operations.SendMessage.Output {
        guard case .json(let body) = input.body else { return .badRequest(.init(body: .json(Self.error("bad_request", "the body must be JSON")))) }
        let to = input.path.user
        let from: String
        switch sender(of: body, to: (to, .user)) {
        case .success(let sender): from = sender
        case .failure(.noSuchUser(let error)): return .notFound(.init(body: .json(error)))
        case .failure(.invalid(let error)): return .badRequest(.init(body: .json(error)))
        }
        let chat = ChatSend(to: to, messageID: body.id, content: .text(body.text))
        let sent: Sent
        switch await send(chat, from: from, asUser: body.from != nil, to: [to]) {
        case .success(let outcome): sent = outcome
        case .failure(.reused):
            return .conflict(.init(body: .json(Self.error("conflict", "message id \(body.id) of \(from) was used for another message"))))
        case .failure(.unavailable(let code, let message)):
            return .serviceUnavailable(.init(body: .json(Self.error(code, message))))
        }
        context.logger.info(
            "API message",
            metadata: ["to": "\(to)", "from": "\(from)", "id": "\(body.id)", "repeat": "\(sent.isRepeat)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
        return .accepted(.init(body: .json(.init(id: body.id, to: to, from: from, serverTime: Int64(sent.serverTime), _repeat: sent.isRepeat))))
    }

    func getPresence(_ input: Operations.GetPresence.Input) async throws -> Operations.GetPresence.Output {
        let user = input.path.user
        switch Self.refusal(of: [(user, .user)]) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        let prefix = context.topics.presenceFilter(user: user).dropLast()  // ".../presence/"
        let messages: [MosquittoMessage]
        do {
            messages = try await broker.retained(filter: context.topics.presenceFilter(user: user)) { topic in
                topic.hasPrefix(prefix) && !topic.dropFirst(prefix.count).contains("/")
            }
        } catch {
            context.logger.warning("API presence lookup failed", metadata: ["user": "\(user)", "error": "\(error)"])
            return .serviceUnavailable(.init(body: .json(Self.error("broker_unavailable", "\(error)"))))
        }
        // The newest state of each device (a change may arrive after its retained state).
        var devices: [String: PresencePayload] = [:]
        for message in messages where !message.payload.isEmpty {
            guard let payload = try? PayloadCodec.decode(PresencePayload.self, from: message.payload) else { continue }
            if let known = devices[payload.device], known.ts > payload.ts { continue }
            devices[payload.device] = payload
        }
        let list = devices.values.sorted { $0.device < $1.device }.map { device in
            Components.Schemas.DevicePresence(
                device: device.device, status: device.status == .online ? .online : .offline, since: Int64(device.ts), gateway: device.gateway)
        }
        return .ok(.init(body: .json(.init(
            user: user, online: list.contains { $0.status == .online }, lastSeen: devices.values.map { Int64($0.ts) }.max(), devices: list))))
    }

    func disconnectUser(_ input: Operations.DisconnectUser.Input) async throws -> Operations.DisconnectUser.Output {
        let user = input.path.user
        let request: Components.Schemas.DisconnectRequest
        switch input.body {
        case .json(let body)?: request = body
        case nil: request = .init()
        }
        switch Self.refusal(of: [(user, .user)] + (request.device.map { [($0, .device)] } ?? [])) {
        case .noSuchUser(let error)?: return .notFound(.init(body: .json(error)))
        case .invalid(let error)?: return .badRequest(.init(body: .json(error)))
        case nil: break
        }
        let reason = request.reason ?? "disconnected by the app"
        guard reason.unicodeScalars.count <= 256 else {
            return .badRequest(.init(body: .json(Self.error("bad_request", "reason is longer than 256 characters"))))
        }
        let topics = context.topics
        var revokedBefore: Int64?
        do {
            if request.revokeTokens == true {
                let cutoff = Int64(Date().timeIntervalSince1970.rounded(.down))
                let topic = topics.revoked(user: user)
                let payload = PayloadCodec.encode(RevocationPayload(before: cutoff, reason: reason, user: user))
                try await broker.publish(OutgoingPublish(
                    topic: topic, payload: payload, qos: .atLeastOnce, retain: true,
                    properties: .gateway(
                        sender: user, expiry: UInt32(clamping: context.configuration.api.revocationRetention),
                        tag: context.authenticator.tag(topic: topic, payload: payload))))
                // This gateway refuses them at once; the others as soon as the broker tells them.
                context.revocations.revoke(user: user, issuedBefore: cutoff)
                revokedBefore = cutoff
            }
            let payload = PayloadCodec.encode(DisconnectPayload(user: user, device: request.device, reason: reason, at: unixMilliseconds()))
            try await broker.publish(OutgoingPublish(
                topic: topics.disconnectTopic, payload: payload, qos: .atLeastOnce,
                properties: .gateway(sender: user, tag: context.authenticator.tag(topic: topics.disconnectTopic, payload: payload))))
        } catch {
            context.logger.warning(
                "API disconnect not sent", metadata: ["user": "\(user)", "error": "\(error)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
            return .serviceUnavailable(.init(body: .json(Self.error("broker_unavailable", "the broker did not take the disconnect: \(error)"))))
        }
        context.logger.notice(
            "API disconnect",
            metadata: [
                "user": "\(user)", "device": "\(request.device ?? "*")", "reason": "\(reason)",
                "revoked-before": "\(revokedBefore.map(String.init) ?? "-")", "api_key": "\(APIKeyMiddleware.caller ?? "?")",
            ])
        return .accepted(.init(body: .json(.init(user: user, device: request.device, reason: reason, revokedBefore: revokedBefore))))
    }

    /// Why a message the API sends was not sent.
    enum SendFailure: Error {
        /// The sender used the id for another message (409).
        case reused
        /// The archive or the broker did not take it (503): the error's code and text.
        case unavailable(String, String)
    }

    /// What an API message came to.
    struct Sent {
        var serverTime: UInt64
        /// Sent before (a repeat of the request): with an archive, published again with its
        /// first offsets; without, not published again.
        var isRepeat: Bool
        /// How many copies were published.
        var copies: Int
    }

    /// Sends `chat` from `from` to `recipients` (the one-to-one recipient, or a group's other
    /// members) through ``ChatAcceptance``, which stores it and publishes it whatever happens to
    /// this request. Sent as a user (`asUser`: the request named `from`), it is a chat that user
    /// sent, as from a device (PROTOCOL.md 6.14): the user's own copy in the user's stream, and a
    /// carbon to every device of the user. The system sender has neither.
    func send(_ chat: ChatSend, from: String, asUser: Bool, to recipients: [String]) async -> Result<Sent, SendFailure> {
        let logger = ConnectionLogger(context.logger, peer: "server API, key \(APIKeyMiddleware.caller ?? "?")")
        let accepted = ChatAcceptance.Chat(
            send: chat, from: from, device: nil, recipients: recipients, ownCopy: asUser, carbon: asUser,
            serverTime: unixMilliseconds(), window: 64)
        switch await acceptance.accept(accepted, via: nil, logger: logger) {
        case .accepted(let outcome):
            return .success(Sent(serverTime: outcome.serverTime, isRepeat: outcome.isRepeat, copies: outcome.copies))
        case .reused:
            return .failure(.reused)
        case .storeUnavailable(_, let message):
            context.logger.warning("API message not stored", metadata: ["from": "\(from)", "id": "\(chat.messageID)", "error": "\(message)"])
            return .failure(.unavailable("store_unavailable", "the message archive did not take the message: \(message)"))
        case .notPublished(let why):
            let stored = context.archive != nil ? " (it is stored: repeat the request)" : ""
            return .failure(.unavailable("broker_unavailable", "the broker did not take the message\(stored): \(why)"))
        }
    }

    /// Why ids from a request are refused.
    enum IDRefusal: Error {
        /// 404: an id the schema allows (64 characters) that no user or device can have (64
        /// bytes, the gateway's limit, IMIdentifier).
        case noSuchUser(Components.Schemas.ErrorResponse)
        /// 400: an id with a character the gateway refuses.
        case invalid(Components.Schemas.ErrorResponse)
    }

    /// The first refusal among `ids`, if any.
    static func refusal(of ids: [(String, IMIdentifier.Kind)]) -> IDRefusal? {
        for (id, kind) in ids {
            do {
                try IMIdentifier.validate(id, kind: kind)
            } catch {
                if case .tooLong = error { return .noSuchUser(Self.error("no_such_user", "no \(kind) can have this id: \(error)")) }
                return .invalid(Self.error("invalid_user_id", "\(error)"))
            }
        }
        return nil
    }

    func getStats(_ input: Operations.GetStats.Input) async throws -> Operations.GetStats.Output {
        let statistics = context.statistics
        func counts(_ read: (TransportCounters) -> Int) -> Components.Schemas.TransportCounts {
            .init(tcp: Int64(read(statistics.transport(.tcp))), websocket: Int64(read(statistics.transport(.websocket))))
        }
        let archive = context.archive.map { Components.Schemas.ArchiveState(available: $0.isAvailable, queued: Int64($0.queued)) }
        let stats = Components.Schemas.GatewayStats(
            gateway: context.gatewayID, ts: Int64(unixMilliseconds()),
            uptimeS: (ContinuousClock.now - statistics.started).components.seconds,
            connections: counts { $0.connections.load(ordering: .relaxed) },
            loggedIn: counts { $0.loggedIn.load(ordering: .relaxed) },
            loginsTotal: counts { $0.logins.load(ordering: .relaxed) },
            chatsInTotal: Int64(statistics.messagesIn),
            messagesOutTotal: Int64(statistics.messagesOut),
            chatP99Ms: statistics.chatLatencyP99(),
            broker: .init(connected: await broker.isConnected, url: "\(context.broker)"),
            archive: archive)
        return .ok(.init(body: .json(stats)))
    }

    static func error(_ code: String, _ message: String) -> Components.Schemas.ErrorResponse {
        Components.Schemas.ErrorResponse(error: code, message: message)
    }
}

extension HTTPEndpoint {
    /// The server API on `api.host:api.port`, for callers with one of `api.keys`.
    static func api(context: GatewayContext, broker: ControlClient, acceptance: ChatAcceptance) throws -> HTTPEndpoint {
        let router = Router(context: GatewayRequestContext.self)
        // The operator console: pages without secrets (what they show, they read from the API
        // with the key the operator types in), so the only requests without a key.
        let console: [String: WebAssets.Asset] = [
            "/console": WebAssets.consolePage,
            "/console/console.js": WebAssets.consoleScript, "/console/console.css": WebAssets.consoleStyle,
        ]
        router.add(middleware: APIKeyMiddleware(keys: context.configuration.api.keys, open: Set(console.keys)))
        for (path, asset) in console {
            router.get(RouterPath(path)) { _, _ in Response.asset(asset) }
        }
        router.add(middleware: APIErrorMiddleware())
        try ServerAPI(context: context, broker: broker, acceptance: acceptance).registerHandlers(on: router)
        return HTTPEndpoint(name: "server API", host: context.configuration.api.host, port: context.configuration.api.port, router: router, logger: context.logger)
    }
}
