import Testing

@testable import Mosquitto

/// The client's bookkeeping of what it waits for, without a broker: waiters are strings.
@Suite struct PendingOperationsTests {
    typealias Pending = PendingOperations<String, String, String, String>

    private func isSuccess(_ outcome: Result<Void, MosquittoError>) -> Bool {
        if case .success = outcome { return true }
        return false
    }

    private func isFailure(_ outcome: Result<Void, MosquittoError>) -> Bool {
        if case .failure = outcome { return true }
        return false
    }

    @Test func connackToAWaiterOrKeptForOne() {
        var pending = Pending()
        pending.connectStarted()
        let answer1 = pending.takeConnack()
        #expect(answer1 == nil)
        pending.awaitConnack("connect")
        let answer2 = pending.connackArrived(.success(.init(sessionPresent: true)))
        #expect(answer2 == "connect")
        // Before the wait: kept, taken once.
        pending.connectStarted()
        let answer3 = pending.connackArrived(.failure(.connectionRefused(.notAuthorized)))
        #expect(answer3 == nil)
        guard case .failure(.connectionRefused(let reason))? = pending.takeConnack() else {
            Issue.record("the refusal was not kept")
            return
        }
        #expect(reason == .notAuthorized)
        let answer4 = pending.takeConnack()
        #expect(answer4 == nil)
    }

    @Test func aConnectionLostBeforeTheConnectWaitsIsItsOutcomeUnlessARefusalCameFirst() {
        var pending = Pending()
        pending.connectStarted()
        pending.connectEnded(.connectionLost(.error(code: 7, message: "The connection was lost.")))
        guard case .failure(.connectionLost(.error(let code, _)))? = pending.takeConnack() else {
            Issue.record("the loss was not kept for the connect")
            return
        }
        #expect(code == 7)
        pending.connectStarted()
        _ = pending.connackArrived(.failure(.connectionRefused(.notAuthorized)))
        pending.connectEnded(.connectionLost(.error(code: 7, message: "The connection was lost.")))
        guard case .failure(.connectionRefused(.notAuthorized))? = pending.takeConnack() else {
            Issue.record("the refusal was not kept")
            return
        }
        // With a waiter, the end is failAll's to tell.
        pending.connectStarted()
        pending.awaitConnack("connect")
        pending.connectEnded(.connectionLost(.aborted))
        #expect(pending.failAll(.connectionLost(.aborted), includingPublishes: false).connect == "connect")
        #expect(pending.takeConnack() == nil)
    }

    @Test func aKeptRefusalSurvivesTheConnectionsEndButNotTheNextConnect() {
        var pending = Pending()
        let answer5 = pending.connackArrived(.failure(.connectionRefused(.badUsernameOrPassword)))
        #expect(answer5 == nil)
        _ = pending.failAll(.connectionLost(.normal), includingPublishes: false)
        let answer6 = pending.takeConnack()
        #expect(answer6 != nil)
        let answer7 = pending.connackArrived(.failure(.connectTimeout))
        #expect(answer7 == nil)
        pending.connectStarted()
        let answer8 = pending.takeConnack()
        #expect(answer8 == nil)
    }

    @Test func subacksAndUnsubacksMeetTheirWaitersInEitherOrder() {
        var pending = Pending()
        let answer9 = pending.awaitSuback(1, "sub1")
        #expect(answer9 == nil)
        let answer10 = pending.subackArrived(1, codes: [ReasonCode(1)])
        #expect(answer10 == "sub1")
        let answer11 = pending.subackArrived(2, codes: [.notAuthorized])
        #expect(answer11 == nil)
        let answer12 = pending.awaitSuback(2, "sub2")
        #expect(answer12 == [.notAuthorized])
        // Taken: the next wait on the same id waits.
        let answer13 = pending.awaitSuback(2, "again")
        #expect(answer13 == nil)
        let answer14 = pending.awaitUnsuback(3, "unsub3")
        #expect(answer14 == false)
        let answer15 = pending.unsubackArrived(3)
        #expect(answer15 == "unsub3")
        let answer16 = pending.unsubackArrived(4)
        #expect(answer16 == nil)
        let answer17 = pending.awaitUnsuback(4, "unsub4")
        #expect(answer17)
    }

    @Test func aCallbackPublishIsToldItsOutcome() throws {
        var pending = Pending()
        _ = pending.publishStarted(mid: 7, qos: .atLeastOnce, waiter: "callback")
        #expect(pending.publishesInFlight == 1)
        let settledFound = pending.published(7, reason: 0)
        let settled = try #require(settledFound)
        #expect(settled.waiter == "callback")
        #expect(isSuccess(settled.outcome))
        #expect(pending.publishesInFlight == 0)
        // A second acknowledgement of the same id (or an unknown one) settles nothing.
        let answer18 = pending.published(7, reason: 0)
        #expect(answer18.map { _ in true } == nil)
    }

    @Test func aTicketsOutcomeWaitsForItsWaiterAndIsCollectedOnce() throws {
        var pending = Pending()
        let early = pending.publishStarted(mid: 1, qos: .atLeastOnce, waiter: nil)
        let late = pending.publishStarted(mid: 2, qos: .atLeastOnce, waiter: nil)
        #expect(early != late)
        // Settled before anyone waits: kept.
        let firstFound = pending.published(1, reason: 0x87)
        let first = try #require(firstFound)
        #expect(first.waiter == nil)
        guard case .settled(.failure(.publishRejected(let reason))) = pending.awaitCompletion(early, "w1") else {
            Issue.record("the rejection was not kept for the ticket")
            return
        }
        #expect(reason == .notAuthorized)
        guard case .collected = pending.awaitCompletion(early, "w1 again") else {
            Issue.record("a second wait found something")
            return
        }
        // Waited for before it settles.
        guard case .waiting = pending.awaitCompletion(late, "w2") else {
            Issue.record("the in-flight ticket did not wait")
            return
        }
        #expect(pending.isAwaited(late))
        let secondFound = pending.published(2, reason: 0)
        let second = try #require(secondFound)
        #expect(second.waiter == "w2")
        let answer19 = pending.takeOutcome(late)
        #expect(answer19 == nil)
    }

    @Test func anAbandonedTicketsOutcomeIsDropped() throws {
        var pending = Pending()
        let ticket = pending.publishStarted(mid: 5, qos: .exactlyOnce, waiter: nil)
        guard case .waiting = pending.awaitCompletion(ticket, "waiter") else {
            Issue.record("did not wait")
            return
        }
        let answer20 = pending.abandon(ticket)
        #expect(answer20 == "waiter")
        #expect(!pending.isAwaited(ticket))
        // Still in flight (libmosquitto has it); its outcome reaches nobody and is not kept.
        #expect(pending.publishesInFlight == 1)
        let settledFound = pending.published(5, reason: 0)
        let settled = try #require(settledFound)
        #expect(settled.waiter == nil)
        let answer21 = pending.takeOutcome(ticket)
        #expect(answer21 == nil)
    }

    @Test func aLostConnectionFailsWaitsAndQoS0ButKeepsQoS1And2() {
        var pending = Pending()
        pending.awaitConnack("connect")
        _ = pending.awaitSuback(1, "sub")
        _ = pending.awaitUnsuback(2, "unsub")
        let answer22 = pending.subackArrived(3, codes: [ReasonCode(0)])
        #expect(answer22 == nil)
        _ = pending.publishStarted(mid: 10, qos: .atMostOnce, waiter: "q0")
        _ = pending.publishStarted(mid: 11, qos: .atLeastOnce, waiter: "q1")
        _ = pending.publishStarted(mid: 12, qos: .exactlyOnce, waiter: "q2")
        let failure = pending.failAll(.connectionLost(.normal), includingPublishes: false)
        #expect(failure.connect == "connect")
        #expect(failure.subscribes == ["sub"])
        #expect(failure.unsubscribes == ["unsub"])
        #expect(failure.publishes.map(\.waiter) == ["q0"])
        #expect(failure.publishes.allSatisfy { isFailure($0.outcome) })
        #expect(pending.publishesInFlight == 2)
        // The early SUBACK went with the connection.
        let answer23 = pending.awaitSuback(3, "late")
        #expect(answer23 == nil)
        // Closing fails the rest, in the order they were started.
        let closed = pending.failAll(.closed, includingPublishes: true)
        #expect(closed.publishes.map(\.waiter) == ["q1", "q2"])
        #expect(closed.subscribes == ["late"])
        #expect(pending.publishesInFlight == 0)
    }

    @Test func heldAcknowledgementsReleaseWritesOnlyWithTheLast() {
        var pending = Pending()
        let first = pending.nextDeliveryID()
        let second = pending.nextDeliveryID()
        #expect(first != second)
        pending.hold(first)
        pending.hold(second)
        #expect(pending.heldCount == 2)
        let answer24 = pending.acknowledge(first)
        #expect(answer24 == false)
        let answer25 = pending.acknowledge(first)
        #expect(answer25 == false)  // repeated
        let answer26 = pending.acknowledge(999)
        #expect(answer26 == false)  // unknown
        let answer27 = pending.acknowledge(second)
        #expect(answer27)
        pending.hold(pending.nextDeliveryID())
        pending.dropHeld()
        #expect(pending.heldCount == 0)
    }
}
