import HummingbirdCore
import Logging
import NIOCore

/// Hummingbird's HTTP/1 connections, each marked close-on-exec as it is set up: NIO accepts
/// without SOCK_CLOEXEC, and a mark made later (per request) could come after the response
/// had left, while the connection was still open.
struct CloseOnExecChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        // The server's child channel initializer: on the channel's loop, before any read.
        CloseOnExec.mark(channel)
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 whose connections are close-on-exec from the start.
    static func http1CloseOnExec() -> HTTPServerBuilder {
        .init { responder in CloseOnExecChildChannel(base: HTTP1Channel(responder: responder, configuration: .init())) }
    }
}
