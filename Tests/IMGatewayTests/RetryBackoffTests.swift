import Testing

@testable import IMGateway

@Suite("RetryBackoff")
struct RetryBackoffTests {
    @Test("1 s after a failure, doubling up to 30 s; back to 1 s once it worked")
    func doublesThenResets() {
        var backoff = RetryBackoff()
        let waits = (0..<7).map { _ in backoff.failed() }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
        backoff.succeeded()
        #expect(backoff.failed() == .seconds(1))
    }

    @Test("a limit below the first wait is the first wait")
    func limitBelowFirst() {
        var backoff = RetryBackoff(first: .seconds(5), limit: .seconds(1))
        #expect(backoff.failed() == .seconds(5))
        #expect(backoff.failed() == .seconds(5))
    }
}
