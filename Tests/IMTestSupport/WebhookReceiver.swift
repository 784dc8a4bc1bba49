import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// A real HTTP server in the test process that records every POST to `/push` (the offline-push
/// webhook) and answers with the statuses it was given, in turn (200 once they run out).
package final class WebhookReceiver: Sendable {
    /// One request as it arrived.
    package struct Request: Sendable {
        package let body: [UInt8]
        package let headers: [String: String]
        /// When it arrived, on the test process's clock.
        package let arrived: ContinuousClock.Instant

        /// The body as a JSON object.
        package var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        }

        /// Whether `X-IMGW-Signature` checks out with `secret`, computed here independently
        /// of imgw's code: `t=<seconds>,v1=<hex HMAC-SHA256 of "<seconds>." + body>`.
        package func signatureVerifies(secret: String) -> Bool {
            guard let header = headers["x-imgw-signature"] else { return false }
            var fields: [String: String] = [:]
            for part in header.split(separator: ",") {
                let pair = part.split(separator: "=", maxSplits: 1)
                if pair.count == 2 { fields[String(pair[0])] = String(pair[1]) }
            }
            guard let time = fields["t"], let hex = fields["v1"], let seconds = Int64(time),
                  abs(seconds - Int64(Date.now.timeIntervalSince1970)) < 300
            else { return false }
            let mac = HMAC<SHA256>.authenticationCode(for: Array("\(time).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
            return mac.map { String(format: "%02x", $0) }.joined() == hex
        }
    }

    /// The statuses to answer, in turn.
    private final class Answers: Sendable {
        private let statuses: Mutex<[Int]>
        package init(_ statuses: [Int]) { self.statuses = Mutex(statuses) }
        /// The next status; 200 once they ran out.
        package func next() -> Int { statuses.withLock { $0.isEmpty ? 200 : $0.removeFirst() } }
    }

    /// Where it listens: the URL for `push.url`.
    package let url: String
    private let requests: Collector<Request>
    private let answers: Answers
    private let services: ServiceGroup
    private let task: Task<Void, any Error>

    /// Starts listening on a free port; `answers` are the statuses of the first requests.
    package static func start(answers: [Int] = []) async throws -> WebhookReceiver {
        let (stream, sink) = AsyncStream.makeStream(of: Request.self)
        let answers = Answers(answers)
        let router = Router()
        router.post("push") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 20)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            sink.yield(Request(body: Array(buffer: body), headers: headers, arrived: .now))
            let status = answers.next()
            return Response(status: .init(code: status))
        }
        let bound = AsyncStream.makeStream(of: Int.self)
        var logger = Logger(label: "webhook-receiver")
        logger.logLevel = .warning
        let application = Application(
            router: router,
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0), serverName: nil),
            onServerRunning: { channel in
                bound.continuation.yield(channel.localAddress?.port ?? 0)
                bound.continuation.finish()
            },
            logger: logger)
        let services = ServiceGroup(configuration: .init(services: [application], gracefulShutdownSignals: [], logger: logger))
        let task = Task { try await services.run() }
        var ports = bound.stream.makeAsyncIterator()
        guard let port = await ports.next(), port > 0 else {
            await services.triggerGracefulShutdown()
            throw TestError("the webhook receiver did not start: \(await task.result)")
        }
        let receiver = WebhookReceiver(
            url: "http://127.0.0.1:\(port)/push", requests: Collector(stream), answers: answers, services: services, task: task)
        TestResources.track { await receiver.stop() }
        return receiver
    }

    private init(url: String, requests: Collector<Request>, answers: Answers, services: ServiceGroup, task: Task<Void, any Error>) {
        self.url = url
        self.services = services
        self.requests = requests
        self.answers = answers
        self.task = task
    }

    /// The next request, or a `TestError` after `seconds`.
    package func next(within seconds: Double = 10) async throws -> Request {
        try await requests.next(within: seconds, "a webhook request")
    }

    /// Requests received and not taken yet.
    package var pending: [Request] {
        get async { await requests.pending }
    }

    /// Stops listening (gracefully) and waits for that; harmless when stopped already.
    package func stop() async {
        await services.triggerGracefulShutdown()
        _ = await task.result
    }
}
