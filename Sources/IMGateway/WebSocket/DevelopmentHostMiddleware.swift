import Hummingbird

/// In development mode (`listen.websocket.development`), every request the WebSocket
/// listener's router answers (the chat page and its files, `/dev/token`, the JavaScript client)
/// must be sent to a loopback host: the page is served and tokens are minted for whoever asks,
/// which is safe on a developer's machine only as long as no other site can reach it under
/// its own name (DNS rebinding). Refused with 403 and a JSON body
/// (``WebSocketUpgradePolicy/refuseHost(_:)``, which the upgrade applies too).
struct DevelopmentHostMiddleware: RouterMiddleware {
    typealias Context = GatewayRequestContext

    let policy: WebSocketUpgradePolicy

    func handle(
        _ request: Request, context: GatewayRequestContext, next: (Request, GatewayRequestContext) async throws -> Response
    ) async throws -> Response {
        if case .refuse(let status, let code, let message)? = policy.refuseHost(request.head.authority) {
            context.logger.notice("development request refused", metadata: ["host": "\(request.head.authority ?? "none")", "path": "\(request.uri.path)"])
            return .error(.init(code: status), code, message)
        }
        return try await next(request, context)
    }
}
