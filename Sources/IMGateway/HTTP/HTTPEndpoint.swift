import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// One of imgw's HTTP listeners (the metrics, the server API), served by Hummingbird. It binds
/// when it runs; ``localAddress()`` waits for that, and throws what kept it from binding.
public final class HTTPEndpoint: Service, CustomStringConvertible, Sendable {
    /// What it serves, in log lines.
    let name: String
    /// The application in a service group of its own, so that ``stop()`` can end it
    /// gracefully (cancelling it makes Hummingbird log an error).
    private let services: ServiceGroup
    private let bound: EventLoopPromise<SocketAddress>
    /// Completed when ``run()`` returns.
    private let ended: EventLoopPromise<Void>

    init(
        name: String, host: String, port: Int, router: Router<GatewayRequestContext>, logger: Logger,
        server: HTTPServerBuilder = .http1CloseOnExec()
    ) {
        let bound = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: SocketAddress.self)
        self.name = name
        self.bound = bound
        self.ended = bound.futureResult.eventLoop.makePromise(of: Void.self)
        var logger = logger
        logger[metadataKey: "component"] = "\(name)"
        let application = Application(
            router: router,
            server: server,
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                _ = try? await channel.eventLoop.submit { CloseOnExec.mark(channel) }.get()
                if let address = channel.localAddress { bound.succeed(address) }
            },
            logger: logger)
        self.services = ServiceGroup(configuration: .init(services: [application], gracefulShutdownSignals: [], logger: logger))
    }

    /// Where it listens, once it does.
    public func localAddress() async throws -> SocketAddress {
        try await bound.futureResult.get()
    }

    public var description: String { name }

    /// Serves until ``stop()``, the enclosing service group's graceful shutdown, or cancellation.
    public func run() async throws {
        defer { ended.succeed() }
        do {
            try await services.run()
            // Ended before it was bound (shut down at once): nobody waits for an address.
            bound.fail(CancellationError())
        } catch {
            bound.fail(error)
            throw error
        }
    }
}

/// The request context of imgw's HTTP endpoints: Hummingbird's, and the name of the caller's
/// API key once it checked out.
public struct GatewayRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The name of the API key the request carried, once ``APIKeyMiddleware`` accepted it.
    public var apiKeyName: String?

    public init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
    }
}

extension HTTPEndpoint {
    /// Ends ``run()`` gracefully (requests being answered are answered first) and waits for
    /// it to return. Only while or after it runs.
    func stop() async {
        await services.triggerGracefulShutdown()
        try? await ended.futureResult.get()
    }
}

extension Response {
    /// A JSON error body `{"error": code, "message": message}` with `status`.
    static func error(_ status: HTTPResponse.Status, _ code: String, _ message: String) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: errorJSON(code, message))))
    }

    /// `{"error": code, "message": message}`.
    static func errorJSON(_ code: String, _ message: String) -> [UInt8] {
        var json = PayloadJSONWriter(capacity: 64 + message.utf8.count)
        json.beginObject()
        json.key("error")
        json.string(code)
        json.key("message")
        json.string(message)
        json.endObject()
        return json.bytes
    }
}
