import Logging
import Mosquitto

extension MosquittoClient {
    /// Connects and subscribes to `subscriptions`, then checks every `interval` and does it
    /// again whenever the connection was lost (``RetryBackoff``: after 1 s, doubling up to 30 s while it fails,
    /// each failure logged as `problem`), until cancelled; then disconnects and closes. A
    /// filter the broker refuses is logged as an error; `subscribed` runs after each
    /// subscription with its results, one per filter.
    func keepSubscribed(
        _ subscriptions: [Subscription], checkingEvery interval: Duration, logger: Logger, problem: String,
        connected: @Sendable (ConnectResult) async -> Void = { _ in },
        subscribed: @Sendable ([SubscriptionResult]) async -> Void = { _ in }
    ) async {
        var backoff = RetryBackoff()
        while !Task.isCancelled {
            do {
                if state != .connected {
                    await connected(try await connect())
                    let results = try await subscribe(subscriptions)
                    for (subscription, result) in zip(subscriptions, results) {
                        guard case .rejected(let reason) = result else { continue }
                        logger.error("the broker refused a subscription", metadata: ["filter": "\(subscription.filter)", "reason": "\(reason)"])
                    }
                    backoff.succeeded()
                    await subscribed(results)
                }
                try await Task.sleep(for: interval)
            } catch is CancellationError {
                break
            } catch {
                let delay = backoff.failed()
                logger.warning("\(problem)", metadata: ["error": "\(error)", "retry-in": "\(delay)"])
                try? await Task.sleep(for: delay)
            }
        }
        try? await disconnect()
        await close()
    }
}
