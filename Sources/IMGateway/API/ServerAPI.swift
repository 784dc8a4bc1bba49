import Foundation
import Hummingbird
import IMGatewayAPI
import IMWire
import Logging
import Mosquitto
import OpenAPIHummingbird
import OpenAPIRuntime

/// The server API's operations (docs/openapi.yaml) on this gateway: what they publish goes
/// through ``APIBroker``, what they read comes from the broker, so any gateway answers alike.
struct ServerAPI: APIProtocol {
    let context: GatewayContext
    let broker: APIBroker

    /// The longest text of a message (docs/openapi.yaml: `maxLength`, in characters).
    static let maxTextLength = 65_536

    func sendMessage(_ input: Operations.SendMessage.Input) async throws -> Operations.SendMessage.Output {
        guard case .json(let body) = input.body else { return .badRequest(.init(body: .json(Self.error("bad_request", "the body must be JSON")))) }
        let to = input.path.user
        let from = body.from ?? context.configuration.api.systemSender
        do {
            try IMIdentifier.validate(to, kind: .user)
            try IMIdentifier.validate(from, kind: .user)
        } catch {
            if case .tooLong = error { return .notFound(.init(body: .json(Self.noSuchUser(error)))) }
            return .badRequest(.init(body: .json(Self.error("invalid_user_id", "\(error)"))))
        }
        guard IMIdentifier.isValidMessageID(body.id) else {
            return .badRequest(.init(body: .json(Self.error("bad_request", IMIdentifier.messageIDRule))))
        }
        guard body.text.unicodeScalars.count <= Self.maxTextLength else {
            return .badRequest(.init(body: .json(Self.error("bad_request", "text is longer than \(Self.maxTextLength) characters"))))
        }
        let chat = ChatSend(to: to, messageID: body.id, content: .text(body.text))
        let fingerprint = ChatFingerprint(chat)
        let serverTime: UInt64
        var isRepeat = false
        switch context.dedup.check(user: from, id: body.id, fingerprint: fingerprint) {
        case .reused:
            return .conflict(.init(body: .json(Self.error("conflict", "message id \(body.id) of \(from) was used for another message"))))
        case .duplicate(let earlier):
            serverTime = earlier ?? unixMilliseconds()
            isRepeat = true
        case .new:
            serverTime = unixMilliseconds()
            do {
                try await broker.publish(
                    .chat(chat, from: from, serverTime: serverTime, topics: context.topics, authenticator: context.authenticator))
            } catch {
                context.logger.warning(
                    "API message not sent",
                    metadata: ["to": "\(to)", "from": "\(from)", "id": "\(body.id)", "error": "\(error)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
                return .serviceUnavailable(.init(body: .json(Self.error("broker_unavailable", "the broker did not take the message: \(error)"))))
            }
            context.dedup.record(user: from, id: body.id, fingerprint: fingerprint, serverTime: serverTime)
            context.statistics.messagesIn.add(1, ordering: .relaxed)
        }
        context.logger.info(
            "API message",
            metadata: ["to": "\(to)", "from": "\(from)", "id": "\(body.id)", "repeat": "\(isRepeat)", "api_key": "\(APIKeyMiddleware.caller ?? "?")"])
        return .accepted(.init(body: .json(.init(id: body.id, to: to, from: from, serverTime: Int64(serverTime), _repeat: isRepeat))))
    }

    func getPresence(_ input: Operations.GetPresence.Input) async throws -> Operations.GetPresence.Output {
        let user = input.path.user
        do {
            try IMIdentifier.validate(user, kind: .user)
        } catch {
            if case .tooLong = error { return .notFound(.init(body: .json(Self.noSuchUser(error)))) }
            return .badRequest(.init(body: .json(Self.error("invalid_user_id", "\(error)"))))
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

    /// A user id the schema allows (64 characters) that no user can have (64 bytes, the
    /// gateway's limit, IMIdentifier): there is no such user.
    static func noSuchUser(_ error: IMIdentifierError) -> Components.Schemas.ErrorResponse {
        Self.error("no_such_user", "no user can have this id: \(error)")
    }

    static func error(_ code: String, _ message: String) -> Components.Schemas.ErrorResponse {
        Components.Schemas.ErrorResponse(error: code, message: message)
    }
}

extension HTTPEndpoint {
    /// The server API on `api.host:api.port`, for callers with one of `api.keys`.
    static func api(context: GatewayContext, broker: APIBroker) throws -> HTTPEndpoint {
        let router = Router(context: GatewayRequestContext.self)
        router.add(middleware: APIKeyMiddleware(keys: context.configuration.api.keys))
        router.add(middleware: APIErrorMiddleware())
        try ServerAPI(context: context, broker: broker).registerHandlers(on: router)
        return HTTPEndpoint(name: "server API", host: context.configuration.api.host, port: context.configuration.api.port, router: router, logger: context.logger)
    }
}
