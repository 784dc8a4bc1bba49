import CMosquitto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The raw direct path's clients: for each pair a publisher and a subscriber, libmosquitto
/// handles used the way a C program would, with no wrapper of ours: MQTT v5, callbacks set
/// with `mosquitto_*_callback_set`, and one thread of their own that drives every handle with
/// `poll` and `mosquitto_loop_read`/`mosquitto_loop_write`/`mosquitto_loop_misc` (libmosquitto's
/// external-loop API, not threaded mode). This is the limit the gateway is held against.
///
/// A publisher keeps up to `window` messages in flight; a message holds its slot until it is
/// both acknowledged by the broker (PUBACK/PUBCOMP, `on_publish`) and received by its
/// subscriber (`on_message`), exactly as on the gateway path. New messages are published
/// from whichever callback frees a slot, on the same thread, and leave with the next
/// `mosquitto_loop_write`.
///
/// libmosquitto 2.0 writes a byte into each handle's internal socketpair per queued packet;
/// only `mosquitto_loop` reads them back. This loop does not (neither would a C program on the
/// external-loop API): once that socketpair's buffer is full the writes fail with EAGAIN,
/// which costs the run about 208 KiB of kernel memory per handle and nothing else.
final class RawMQTTClients: @unchecked Sendable {
    // @unchecked Sendable: `pairs`, the handles, `loopRunning`, `loopStartedAt` and every
    // field of `Pair` are touched only by
    // the loop thread once it runs (the callbacks run there too, inside loop_read and
    // loop_write); before it starts, only by `init` and `connect` on the creating task, and
    // the thread is started after they are done. Other threads reach the loop only through
    // `thread` (its shared state is a Mutex, its wake-up an eventfd).

    /// One publisher → subscriber pair; confined to the loop thread.
    private final class Pair {
        let index: Int
        let topic: String
        let publisher: OpaquePointer
        let subscriber: OpaquePointer
        var inflight = 0
        var lastSequence = 0
        /// Message ids of publishes not yet acknowledged, and the sequence each carries.
        var sequences: [Int32: Int] = [:]
        var publisherConnack: Int32?
        var subscriberConnack: Int32?
        var subscribed = false
        /// Set once in the owner's init; the owner outlives its pairs' callbacks (the
        /// handles are destroyed in its deinit).
        unowned(unsafe) var owner: RawMQTTClients!

        init(index: Int, topic: String, publisher: OpaquePointer, subscriber: OpaquePointer) {
            self.index = index
            self.topic = topic
            self.publisher = publisher
            self.subscriber = subscriber
        }
    }

    /// What other threads ask of the loop, and what it reports.
    private struct Control {
        var running = false
        var startedAt: UInt64 = 0
        var stopping = false
        var connected = 0
        var refusal: String?
    }

    private let ledger: ChatLedger
    private let settings: ChatSettings
    private let qos: Int32
    private let pairs: [Pair]
    private let thread = RawLoopThread(Control())
    /// The loop thread's copy of `control.running` and `startedAt`, read once per round.
    private var loopRunning = false
    private var loopStartedAt: UInt64 = 0

    private static let libraryInitialized: Void = { mosquitto_lib_init() }()

    /// Creates the handles (not connected yet).
    init(pairs count: Int, clientPrefix: String, topicPrefix: String, ledger: ChatLedger, settings: ChatSettings) throws {
        _ = Self.libraryInitialized
        self.ledger = ledger
        self.settings = settings
        self.qos = settings.qos == 2 ? 2 : 1
        var pairs: [Pair] = []
        for index in 0..<count {
            guard let publisher = mosquitto_new("\(clientPrefix)-pub-\(index)", true, nil) else {
                throw BenchError("raw direct path: mosquitto_new failed (errno \(errno))")
            }
            guard let subscriber = mosquitto_new("\(clientPrefix)-sub-\(index)", true, nil) else {
                mosquitto_destroy(publisher)
                throw BenchError("raw direct path: mosquitto_new failed (errno \(errno))")
            }
            pairs.append(Pair(index: index, topic: "\(topicPrefix)/\(index)", publisher: publisher, subscriber: subscriber))
        }
        self.pairs = pairs
        for pair in pairs {
            pair.owner = self
            let userdata = Unmanaged.passUnretained(pair).toOpaque()
            for handle in [pair.publisher, pair.subscriber] {
                mosquitto_user_data_set(handle, userdata)
                mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5)
            }
        }
    }

    deinit {
        for pair in pairs {
            mosquitto_destroy(pair.publisher)
            mosquitto_destroy(pair.subscriber)
        }
    }

    /// Connects every handle (subscribers with `receiveMaximum`, as the gateway's sessions
    /// have), starts the loop thread, subscribes, and returns once the broker confirmed all.
    func connect(to broker: BrokerAddress, receiveMaximum: Int) async throws {
        var properties: OpaquePointer?
        mosquitto_property_add_int16(&properties, Int32(MQTT_PROP_RECEIVE_MAXIMUM.rawValue), UInt16(clamping: receiveMaximum))
        defer { mosquitto_property_free_all(&properties) }
        for pair in pairs {
            installCallbacks(pair)
            for (handle, props) in [(pair.subscriber, properties), (pair.publisher, nil)] {
                // A blocking TCP connect (numeric loopback address: no resolver wait).
                broker.authenticate(handle)
                let rc = mosquitto_connect_bind_v5(handle, broker.host, Int32(broker.port), 60, nil, props)
                guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                    throw BenchError("raw direct path: cannot connect to \(broker): \(String(cString: mosquitto_strerror(rc)))")
                }
            }
        }
        thread.start(name: "imbench-raw") { [self] in loop() }
        try await thread.waitUntil(within: 10, timedOut: BenchError("raw direct path: no CONNACK or SUBACK within 10 s")) { control in
            if let refusal = control.refusal { throw BenchError("raw direct path: \(refusal)") }
            return control.connected == pairs.count
        }
    }

    /// Starts publishing: every publisher fills its window (or what the rate allows by now).
    func start() {
        thread.shared.withLock { control in
            control.running = true
            control.startedAt = MonotonicClock.nanoseconds()
        }
        wake()
    }

    /// Stops publishing new messages (those in flight complete).
    func stop() {
        thread.shared.withLock { $0.running = false }
    }

    /// Disconnects every handle and ends the loop thread; returns once it has ended.
    func close() async {
        await thread.close { control in
            control.running = false
            control.stopping = true
        }
    }

    private func wake() {
        thread.wake()
    }

    // MARK: The loop thread

    private func loop() {
        let handles = pairs.flatMap { [$0.publisher, $0.subscriber] }
        var fds: [pollfd] = []
        var nextMisc = MonotonicClock.nanoseconds() + 1_000_000_000
        var disconnecting = false
        while true {
            let (running, startedAt, stopping) = thread.shared.withLock { ($0.running, $0.startedAt, $0.stopping) }
            loopRunning = running && !stopping
            loopStartedAt = startedAt
            if stopping && !disconnecting {
                disconnecting = true
                for handle in handles { mosquitto_disconnect_v5(handle, 0, nil) }
            }
            if disconnecting && handles.allSatisfy({ mosquitto_socket($0) < 0 || !mosquitto_want_write($0) }) {
                break
            }
            if running && !disconnecting {
                for pair in pairs { pump(pair, startedAt: startedAt) }
            }
            // With a rate, wake up every millisecond for what has become due.
            RawLoopRound.run(handles, fds: &fds, wakeFD: thread.wakeFD, timeoutMilliseconds: running && settings.rate != nil ? 1 : 100)
            if MonotonicClock.nanoseconds() >= nextMisc {
                for handle in handles { mosquitto_loop_misc(handle) }
                nextMisc = MonotonicClock.nanoseconds() + 1_000_000_000
            }
        }
    }

    /// Publishes what the window, and the rate if any, allow now (on the loop thread).
    private func pump(_ pair: Pair, startedAt: UInt64) {
        var budget = settings.window - pair.inflight
        if let rate = settings.ratePerPair {
            let due = Int(Double(MonotonicClock.nanoseconds() - startedAt) * rate / 1e9) + 1 - pair.lastSequence
            budget = min(budget, due)
        }
        guard budget > 0 else { return }
        for _ in 0..<budget {
            pair.lastSequence += 1
            let sequence = pair.lastSequence
            let payload = BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: settings.size)
            var mid: Int32 = 0
            let rc = payload.withUnsafeBytes { bytes in
                mosquitto_publish_v5(pair.publisher, &mid, pair.topic, Int32(bytes.count), bytes.baseAddress, qos, false, nil)
            }
            ledger.sent(pair: pair.index)
            guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                ledger.refused(pair: pair.index, reason: "mosquitto_publish_v5: \(String(cString: mosquitto_strerror(rc)))")
                return
            }
            pair.inflight += 1
            pair.sequences[mid] = sequence
        }
    }

    /// The slot of a completed message is free: publish the next one if running.
    private func freed(_ pair: Pair) {
        pair.inflight -= 1
        if loopRunning { pump(pair, startedAt: loopStartedAt) }
    }

    // MARK: Callbacks (on the loop thread)

    private func installCallbacks(_ pair: Pair) {
        for handle in [pair.publisher, pair.subscriber] { mosquitto_connect_v5_callback_set(handle, Self.onConnect) }
        mosquitto_publish_v5_callback_set(pair.publisher, Self.onPublish)
        mosquitto_subscribe_v5_callback_set(pair.subscriber, Self.onSubscribe)
        mosquitto_message_v5_callback_set(pair.subscriber, Self.onMessage)
    }

    /// The clients and the pair a callback is for (the pair is the handles' userdata).
    private static func context(_ userdata: UnsafeMutableRawPointer?) -> (RawMQTTClients, Pair)? {
        guard let userdata else { return nil }
        let pair = Unmanaged<Pair>.fromOpaque(userdata).takeUnretainedValue()
        return (pair.owner, pair)
    }

    private static let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
        handle, userdata, reason, _, _ in
        guard let (clients, pair) = context(userdata) else { return }
        if reason != 0 {
            clients.thread.shared.withLock { $0.refusal = "the broker refused the connection (reason \(reason))" }
            return
        }
        if handle == pair.publisher {
            pair.publisherConnack = reason
        } else {
            pair.subscriberConnack = reason
            let rc = mosquitto_subscribe_v5(pair.subscriber, nil, pair.topic, clients.qos, 0, nil)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                clients.thread.shared.withLock { $0.refusal = "subscribe: \(String(cString: mosquitto_strerror(rc)))" }
            }
        }
        clients.confirmIfReady(pair)
    }

    private static let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?, OpaquePointer?) -> Void = {
        _, userdata, _, count, granted, _ in
        guard let (clients, pair) = context(userdata) else { return }
        if count < 1 || (granted?.pointee ?? 0x80) >= 0x80 {
            clients.thread.shared.withLock { $0.refusal = "the broker refused the subscription to \(pair.topic)" }
            return
        }
        pair.subscribed = true
        clients.confirmIfReady(pair)
    }

    private func confirmIfReady(_ pair: Pair) {
        if pair.publisherConnack == 0 && pair.subscriberConnack == 0 && pair.subscribed {
            thread.shared.withLock { $0.connected += 1 }
        }
    }

    private static let onPublish: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
        _, userdata, mid, reason, _ in
        guard let (clients, pair) = context(userdata), let sequence = pair.sequences.removeValue(forKey: mid) else { return }
        if reason >= 0x80 {
            clients.ledger.refused(pair: pair.index, reason: "broker reason 0x\(String(reason, radix: 16))")
        } else if !clients.ledger.acked(pair: pair.index, sequence: sequence) {
            return
        }
        clients.freed(pair)
    }

    private static let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?, OpaquePointer?) -> Void = {
        _, userdata, message, _ in
        guard let (clients, pair) = context(userdata), let message = message?.pointee, let bytes = message.payload else { return }
        let now = MonotonicClock.nanoseconds()
        guard let (sequence, sentAt) = BenchPayload.parse(UnsafeRawBufferPointer(start: bytes, count: Int(message.payloadlen))) else { return }
        if clients.ledger.received(pair: pair.index, sequence: sequence, sentAt: sentAt, now: now) {
            clients.freed(pair)
        }
    }
}
