@testable import IMGateway
import Mosquitto
import Testing

@Suite("ConnectRetry")
struct ConnectRetryTests {
    static let unspecified = MosquittoError.connectionRefused(.unspecifiedError)

    @Test("0x80, 0x88 and 0x89 may pass; bad credentials, not authorized, errors that are not refusals do not")
    func whichRefusals() {
        #expect(ConnectRetry.mayPass(Self.unspecified))
        #expect(ConnectRetry.mayPass(MosquittoError.connectionRefused(.serverUnavailable)))
        #expect(ConnectRetry.mayPass(MosquittoError.connectionRefused(.serverBusy)))
        #expect(!ConnectRetry.mayPass(MosquittoError.connectionRefused(.badUsernameOrPassword)))
        #expect(!ConnectRetry.mayPass(MosquittoError.connectionRefused(.notAuthorized)))
        #expect(!ConnectRetry.mayPass(MosquittoError.connectTimeout))
        #expect(!ConnectRetry.mayPass(MosquittoError.connectionLost(.normal)))
    }

    @Test("a broker that cannot be reached (nothing listens, no CONNACK) is tried every 250 ms until the deadline less the reserve; a refusal's delays are not used up by it")
    func unreachable() {
        let now = ContinuousClock.now
        let lost = MosquittoError.connectionLost(.error(code: 7, message: "The connection was lost."))
        #expect(ConnectRetry.isUnreachable(lost) && ConnectRetry.isUnreachable(MosquittoError.connectTimeout))
        #expect(ConnectRetry.isUnreachable(MosquittoError.library(code: 14, message: "Connection refused")), "the blocking connect's refusal")
        #expect(!ConnectRetry.isUnreachable(Self.unspecified) && !ConnectRetry.isUnreachable(MosquittoError.connectionLost(.normal)))
        var retry = ConnectRetry(deadline: now + .seconds(10))
        var waited = Duration.zero
        while let delay = retry.delay(after: lost, now: now + waited) {
            #expect(delay == ConnectRetry.unreachableDelay)
            waited += delay
        }
        #expect(waited == .seconds(9), "every 250 ms through the login's time, less the reserve")
        #expect(retry.tries == 37)
        // The refusals' own delays are all still there.
        var mixed = ConnectRetry(deadline: now + .seconds(60))
        _ = mixed.delay(after: lost, now: now)
        #expect(mixed.delay(after: Self.unspecified, now: now) == .milliseconds(100))
        #expect(mixed.delay(after: lost, now: now) == ConnectRetry.unreachableDelay)
        #expect(mixed.delay(after: Self.unspecified, now: now) == .milliseconds(300))
    }

    @Test("with time enough, the delays grow in turn, then stop")
    func delays() {
        let now = ContinuousClock.now
        var retry = ConnectRetry(deadline: now + .seconds(60))
        var delays: [Duration] = []
        while let delay = retry.delay(after: Self.unspecified, now: now) { delays.append(delay) }
        #expect(delays == ConnectRetry.delays)
        #expect(retry.tries == ConnectRetry.delays.count + 1)
    }

    @Test("no try starts past the deadline less the reserve; a final refusal takes no try")
    func deadline() {
        let now = ContinuousClock.now
        var retry = ConnectRetry(deadline: now + .milliseconds(1500))
        #expect(retry.delay(after: MosquittoError.connectionRefused(.notAuthorized), now: now) == nil)
        #expect(retry.delay(after: Self.unspecified, now: now) == .milliseconds(100))
        #expect(retry.delay(after: Self.unspecified, now: now + .milliseconds(100)) == .milliseconds(300))
        // 1 s more would leave less than the reserve.
        #expect(retry.delay(after: Self.unspecified, now: now + .milliseconds(400)) == nil)
        #expect(retry.tries == 3)
    }
}
