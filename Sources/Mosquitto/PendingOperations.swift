/// What a ``MosquittoClient`` waits for from the broker, as plain values: the connect's
/// CONNACK, SUBACKs and UNSUBACKs by message id, publishes by message id and ticket, and the
/// deliveries whose acknowledgement the application holds.
///
/// No I/O, no clock, no continuation is resumed here. Each method takes what happened and
/// returns whom to tell (a waiter and its outcome); the client resumes them. An answer that
/// comes before anyone waits for it is kept for the waiter to come: the broker's packets
/// are handled inside `mosquitto_loop_read`, and a caller's wait is registered only when its
/// task runs again. The waiters are type parameters so that the bookkeeping is tested with
/// plain values.
struct PendingOperations<ConnectWaiter, SubscribeWaiter, UnsubscribeWaiter, PublishWaiter> {
    private var connectWaiter: ConnectWaiter?
    /// CONNACK's outcome when it came before the connect registered its waiter.
    private var earlyConnectOutcome: Result<MosquittoClient.ConnectResult, MosquittoError>?
    private var subscribes: [Int32: SubscribeWaiter] = [:]
    /// SUBACK reason codes that came before their waiter, by message id.
    private var earlySubacks: [Int32: [ReasonCode]] = [:]
    private var unsubscribes: [Int32: UnsubscribeWaiter] = [:]
    /// UNSUBACKs that came before their waiter.
    private var earlyUnsubacks: Set<Int32> = []

    private struct Publish {
        var qos: QoS
        var ticket: UInt64
        /// Whom to tell; nil until someone waits (ticket publishes).
        var waiter: PublishWaiter?
        /// Nobody will collect the outcome (its waiter was cancelled).
        var abandoned = false
    }
    private var publishes: [Int32: Publish] = [:]
    /// The message id of each publish still in flight, by ticket.
    private var ticketMIDs: [UInt64: Int32] = [:]
    /// Outcomes of publishes nobody waited for yet, by ticket.
    private var completed: [UInt64: Result<Void, MosquittoError>] = [:]
    private var lastTicket: UInt64 = 0

    /// Delivered QoS 1/2 messages the application has not acknowledged (manual mode).
    private var held: Set<UInt64> = []
    private var lastDeliveryID: UInt64 = 0

    init() {}

    // MARK: Connect

    /// A connect starts: an outcome kept from an earlier one is dropped.
    mutating func connectStarted() {
        earlyConnectOutcome = nil
    }

    /// The connection ended while a connect was under way and before it waited for CONNACK
    /// (nothing listens: libmosquitto reports it as the socket is set up): the connect, when it
    /// waits, gets `error`, unless an outcome (a refusal, which says more) is kept already.
    /// With a waiter, nothing: ``failAll(_:includingPublishes:)`` tells it.
    mutating func connectEnded(_ error: MosquittoError) {
        guard connectWaiter == nil, earlyConnectOutcome == nil else { return }
        earlyConnectOutcome = .failure(error)
    }

    /// CONNACK's outcome if it came before the connect waited for it (taken: a second call
    /// finds none). A refusal is kept even when the connection has ended since.
    mutating func takeConnack() -> Result<MosquittoClient.ConnectResult, MosquittoError>? {
        defer { earlyConnectOutcome = nil }
        return earlyConnectOutcome
    }

    /// The connect waits for CONNACK (after ``takeConnack()`` found none): `waiter` is
    /// kept until ``connackArrived(_:)`` or ``failAll(_:includingPublishes:)``.
    mutating func awaitConnack(_ waiter: ConnectWaiter) {
        connectWaiter = waiter
    }

    /// CONNACK (or a connect time-out): the waiter to tell, or nil when the outcome is kept
    /// for the waiter to come.
    mutating func connackArrived(_ outcome: Result<MosquittoClient.ConnectResult, MosquittoError>) -> ConnectWaiter? {
        if let waiter = connectWaiter {
            connectWaiter = nil
            return waiter
        }
        earlyConnectOutcome = outcome
        return nil
    }

    // MARK: Subscribe and unsubscribe

    /// A subscribe waits for the SUBACK of `mid`: its codes if it came already, or nil.
    mutating func awaitSuback(_ mid: Int32, _ waiter: SubscribeWaiter) -> [ReasonCode]? {
        if let codes = earlySubacks.take(mid) { return codes }
        subscribes[mid] = waiter
        return nil
    }

    /// The SUBACK of `mid`: its waiter, or nil when the codes are kept for the waiter to come.
    mutating func subackArrived(_ mid: Int32, codes: [ReasonCode]) -> SubscribeWaiter? {
        if let waiter = subscribes.take(mid) { return waiter }
        earlySubacks[mid] = codes
        return nil
    }

    /// An unsubscribe waits for the UNSUBACK of `mid`: true if it came already.
    mutating func awaitUnsuback(_ mid: Int32, _ waiter: UnsubscribeWaiter) -> Bool {
        if earlyUnsubacks.take(mid) { return true }
        unsubscribes[mid] = waiter
        return false
    }

    /// The UNSUBACK of `mid`: its waiter, or nil when it is kept for the waiter to come.
    mutating func unsubackArrived(_ mid: Int32) -> UnsubscribeWaiter? {
        if let waiter = unsubscribes.take(mid) { return waiter }
        earlyUnsubacks.insert(mid)
        return nil
    }

    // MARK: Publish

    /// A publish handed to libmosquitto as `mid`; `waiter` is told its outcome (or, nil,
    /// whoever calls ``awaitCompletion(_:_:)`` with the ticket returned).
    mutating func publishStarted(mid: Int32, qos: QoS, waiter: PublishWaiter?) -> UInt64 {
        lastTicket += 1
        publishes[mid] = Publish(qos: qos, ticket: lastTicket, waiter: waiter)
        ticketMIDs[lastTicket] = mid
        return lastTicket
    }

    /// What a wait for a ticket's outcome finds.
    enum CompletionWait {
        /// The outcome came already.
        case settled(Result<Void, MosquittoError>)
        /// In flight: the waiter is kept.
        case waiting
        /// Settled and collected already (a second wait): nothing to report.
        case collected
    }

    /// Someone waits for the outcome of `ticket`.
    mutating func awaitCompletion(_ ticket: UInt64, _ waiter: PublishWaiter) -> CompletionWait {
        if let outcome = completed.take(ticket) { return .settled(outcome) }
        guard let mid = ticketMIDs[ticket], publishes[mid] != nil else { return .collected }
        publishes[mid]?.waiter = waiter
        return .waiting
    }

    /// An outcome ready for `ticket` (taken: a second call finds none).
    mutating func takeOutcome(_ ticket: UInt64) -> Result<Void, MosquittoError>? {
        completed.take(ticket)
    }

    /// Nobody will collect the outcome of `ticket`: the waiter it had, to be told it was
    /// cancelled (the publish stays with libmosquitto, its outcome is dropped).
    @discardableResult
    mutating func abandon(_ ticket: UInt64) -> PublishWaiter? {
        guard let mid = ticketMIDs[ticket], publishes[mid] != nil else { return nil }
        let waiter = publishes[mid]?.waiter
        publishes[mid]?.waiter = nil
        publishes[mid]?.abandoned = true
        return waiter
    }

    /// Whether `ticket` has a waiter (a cancellation handler resumes only a waiting one).
    func isAwaited(_ ticket: UInt64) -> Bool {
        guard let mid = ticketMIDs[ticket] else { return false }
        return publishes[mid]?.waiter != nil
    }

    /// A publish settled: its waiter and outcome.
    struct Settlement {
        /// Whom to tell; nil when the outcome was kept for a later wait or dropped.
        var waiter: PublishWaiter?
        var outcome: Result<Void, MosquittoError>
    }

    /// The broker acknowledged `mid` (PUBACK/PUBCOMP, or QoS 0 written) with `reason`:
    /// nil for a message id that is not pending (the client's in-flight count stays).
    mutating func published(_ mid: Int32, reason: Int32) -> Settlement? {
        guard let publish = publishes.take(mid) else { return nil }
        let outcome: Result<Void, MosquittoError> =
            reason >= 0x80 ? .failure(.publishRejected(ReasonCode(UInt8(clamping: reason)))) : .success(())
        return settle(publish, outcome)
    }

    private mutating func settle(_ publish: Publish, _ outcome: Result<Void, MosquittoError>) -> Settlement {
        ticketMIDs.take(publish.ticket)
        if publish.waiter == nil && !publish.abandoned {
            completed[publish.ticket] = outcome
        }
        return Settlement(waiter: publish.waiter, outcome: outcome)
    }

    /// Publishes handed to libmosquitto and not settled.
    var publishesInFlight: Int { publishes.count }

    // MARK: Failure

    /// Whom to tell that the connection or the client failed.
    struct Failure {
        var connect: ConnectWaiter?
        var subscribes: [SubscribeWaiter] = []
        var unsubscribes: [UnsubscribeWaiter] = []
        /// The publishes failed, each with its waiter if it has one.
        var publishes: [Settlement] = []
    }

    /// The connection ended or the client closed: every wait for an answer ends with
    /// `error`. QoS 1/2 publishes stay pending (libmosquitto resends them on the next
    /// connect) unless `includingPublishes`; QoS 0 ones never survive a connection.
    mutating func failAll(_ error: MosquittoError, includingPublishes: Bool) -> Failure {
        var failure = Failure(connect: connectWaiter)
        connectWaiter = nil
        earlySubacks.removeAll()
        earlyUnsubacks.removeAll()
        failure.subscribes = Array(subscribes.values)
        subscribes.removeAll()
        failure.unsubscribes = Array(unsubscribes.values)
        unsubscribes.removeAll()
        let dropped = publishes.filter { includingPublishes || $0.value.qos == .atMostOnce }
        // In the order they were started.
        for (mid, publish) in dropped.sorted(by: { $0.value.ticket < $1.value.ticket }) {
            publishes.take(mid)
            failure.publishes.append(settle(publish, .failure(error)))
        }
        return failure
    }

    // MARK: Held acknowledgements (manual mode)

    /// A delivery id for a QoS 1/2 message just received.
    mutating func nextDeliveryID() -> UInt64 {
        lastDeliveryID += 1
        return lastDeliveryID
    }

    /// The application acknowledges `deliveryID` later.
    mutating func hold(_ deliveryID: UInt64) {
        held.insert(deliveryID)
    }

    /// The application is done with `deliveryID`: true when that was the last one held
    /// (the held writes can go); false for an unknown or repeated id, or with others held.
    mutating func acknowledge(_ deliveryID: UInt64) -> Bool {
        held.take(deliveryID) && held.isEmpty
    }

    /// Deliveries not acknowledged yet.
    var heldCount: Int { held.count }

    /// The connection ended: held acknowledgements go with it (the broker redelivers).
    mutating func dropHeld() {
        held.removeAll()
    }
}

// A client keeps no storage between operations: a dictionary or set that had elements keeps
// its capacity when they are removed one by one, and thousands of idle device sessions would
// each hold the storage of their busiest moment.

extension Dictionary {
    /// Removes the value for `key`; releases the storage when that was the last.
    @discardableResult
    fileprivate mutating func take(_ key: Key) -> Value? {
        let value = removeValue(forKey: key)
        if isEmpty && value != nil { self = [:] }
        return value
    }
}

extension Set {
    /// Removes `member`, true if it was there; releases the storage when that was the last.
    fileprivate mutating func take(_ member: Element) -> Bool {
        guard remove(member) != nil else { return false }
        if isEmpty { self = [] }
        return true
    }
}
