import Logging
import Mosquitto

extension MosquittoClient {
    /// Connects and subscribes to `subscriptions`, then checks every `interval` and does it
    /// again whenever the connection was lost (after 1 s, doubling up to 30 s while it fails,
    /// each failure logged as `problem`), until cancelled; then disconnects and closes.
    func keepSubscribed(_ subscriptions: [Subscription], checkingEvery interval: Duration, logger: Logger, problem: String) async {
        var backoff = 1.0
        while !Task.isCancelled {
            do {
                if state != .connected {
                    try await connect()
                    _ = try await subscribe(subscriptions)
                    backoff = 1
                }
                try await Task.sleep(for: interval)
            } catch is CancellationError {
                break
            } catch {
                logger.warning("\(problem)", metadata: ["error": "\(error)", "retry-in": "\(backoff) s"])
                try? await Task.sleep(for: .seconds(backoff))
                backoff = min(backoff * 2, 30)
            }
        }
        try? await disconnect()
        await close()
    }
}
