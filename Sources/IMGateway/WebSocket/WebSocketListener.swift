import Foundation
import Hummingbird
import HummingbirdCore
import IMWire
import IMWeb
import NIOCore
import NIOSSL

/// The WebSocket listener (`listen.websocket`): browser devices upgrade on its path
/// (``WebSocketDeviceChannel``); it also serves the JavaScript client (`/imclient.js`), and in
/// development the web chat page (`/`, `/chat.js`, `/chat.css`) and development tokens
/// (`GET /dev/token?user=USER[&device=DEVICE]`).
enum WebSocketListener {
    /// The paths of the files and development endpoints it serves: the upgrade path is none of them.
    static let pagePaths = GatewayConfiguration.WebSocketSettings.pagePaths

    /// The listener, serving devices through `install` (which adds a device's handlers to an
    /// upgraded channel).
    static func endpoint(
        context: GatewayContext, tls: NIOSSLContext?, install: @escaping @Sendable (any Channel) throws -> Void
    ) -> HTTPEndpoint {
        let configuration = context.configuration
        let settings = configuration.listen.websocket
        let router = Router(context: GatewayRequestContext.self)
        let policy = WebSocketUpgradePolicy(settings: settings, tls: tls != nil)
        if settings.development { router.add(middleware: DevelopmentHostMiddleware(policy: policy)) }
        router.get("imclient.js") { _, _ in Response.asset(WebAssets.client) }
        if settings.development {
            // The page learns where to connect from a meta tag: the path is the listener's.
            let page = WebAssets.Asset(
                name: WebAssets.chatPage.name, contentType: WebAssets.chatPage.contentType,
                bytes: Array(String(decoding: WebAssets.chatPage.bytes, as: UTF8.self).replacingFirst(
                    "</head>", with: "<meta name=\"imgw-ws-path\" content=\"\(settings.path)\">\n</head>").utf8))
            router.get("/") { _, _ in Response.asset(page) }
            router.get("chat.html") { _, _ in Response.asset(page) }
            router.get("chat.js") { _, _ in Response.asset(WebAssets.chatScript) }
            router.get("chat.css") { _, _ in Response.asset(WebAssets.chatStyle) }
            let minter = TokenMinter(secret: configuration.auth.jwtSecret, issuer: configuration.auth.issuer)
            router.get("dev/token") { request, _ in
                guard let user = request.uri.queryParameters.get("user"), !user.isEmpty else {
                    return Response.error(.badRequest, "bad_request", "give the user: /dev/token?user=USER")
                }
                let device = request.uri.queryParameters.get("device")
                do {
                    let token = try await minter.mint(user: user, device: device, validFor: 24 * 3600)
                    var json = PayloadJSONWriter(capacity: 64 + token.utf8.count)
                    json.beginObject()
                    json.key("token")
                    json.string(token)
                    json.key("user")
                    json.string(user)
                    json.endObject()
                    return Response(
                        status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-store"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: json.bytes)))
                } catch {
                    return Response.error(.badRequest, "bad_request", "\(error)")
                }
            }
        }
        let maxFrameSize = configuration.limits.maxBodyLength + IMWire.headerLength
        let builder = HTTPServerBuilder { responder in
            WebSocketDeviceChannel(
                responder: responder, policy: policy, tls: tls, maxFrameSize: maxFrameSize, install: install)
        }
        return HTTPEndpoint(name: "WebSocket listener", host: settings.host, port: settings.port, router: router, logger: context.logger, server: builder)
    }
}

extension Response {
    /// One of the files the gateway serves to browsers (no caching: they change with imgw).
    static func asset(_ asset: WebAssets.Asset) -> Response {
        Response(
            status: .ok, headers: [.contentType: asset.contentType, .cacheControl: "no-cache"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: asset.bytes)))
    }
}

extension String {
    fileprivate func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = range(of: target) else { return self }
        return replacingCharacters(in: range, with: replacement)
    }
}
