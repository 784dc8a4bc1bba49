import CMosquitto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The raw libmosquitto paths of `imbench group`: one publisher and one subscriber per member
/// (the sender excepted), libmosquitto handles used the way a C program would, driven by one
/// thread of their own on the external-loop API (``RawLoopRound``), no wrapper of ours.
///
/// - ``Mode/perMember``: the publisher publishes every message once per member, to the
///   member's own topic (what the gateway does, one inbox per user);
/// - ``Mode/fanOut``: it publishes once to the group's topic, to which every member is
///   subscribed, and the broker makes the copies.
///
/// Offline members connect with a persistent session (clean start off, a session expiry),
/// subscribe, and disconnect before the phase, so that the broker queues their messages; they
/// come back with ``bringOfflineBack()``. A message holds a slot of the publisher's window until
/// the broker acknowledged every publish of it and every online member received it (``GroupLedger``).
final class RawGroupClients: @unchecked Sendable {
    // @unchecked Sendable: the handles, `clients`, `loopRunning` and the publisher's state
    // (`inflight`, `lastSequence`, `pending`, `outstanding`, `failed`) are touched only by the
    // loop thread once it runs (the callbacks run there too, inside loop_read and loop_write);
    // before it starts, only by `init` and `connect` on the creating task, and the thread is
    // started after they are done. Other threads reach the loop only through `thread` (its
    // shared state is a Mutex, its wake-up an eventfd).

    /// How a message reaches the members.
    enum Mode: String, Sendable {
        /// One publish per member, to its own topic.
        case perMember = "per_member"
        /// One publish to the group's topic; the broker copies it to every subscriber.
        case fanOut = "fan_out"
    }

    /// One handle: the publisher (`member` nil) or a member's subscriber.
    private final class RawClient {
        let handle: OpaquePointer
        let member: Int?
        let topic: String
        var connected = false
        /// Set once in the owner's init; the owner outlives its clients' callbacks (the
        /// handles are destroyed in its deinit).
        unowned(unsafe) var owner: RawGroupClients!

        init(handle: OpaquePointer, member: Int?, topic: String) {
            self.handle = handle
            self.member = member
            self.topic = topic
        }
    }

    /// What other threads ask of the loop, and what it reports back.
    private struct Control {
        var running = false
        var stopping = false
        /// Members whose subscription the broker confirmed, plus one for the publisher's CONNACK.
        var ready = 0
        var refusal: String?
        /// Offline members: to be disconnected, disconnected, to be reconnected.
        var takeOffline = false
        var offlineDown = false
        var bringBack = false
    }

    private let mode: Mode
    private let ledger: GroupLedger
    private let window: Int
    private let size: Int
    private let qos: Int32
    private let publisher: RawClient
    private let members: [RawClient]
    private let thread = RawLoopThread(Control())
    /// Loop thread only: the copy of `control.running` for this round.
    private var loopRunning = false
    /// Loop thread only: the publisher's window and its messages' acknowledgements.
    private var inflight = 0
    private var lastSequence = 0
    /// Message id of each unacknowledged publish → the message's sequence.
    private var pending: [Int32: Int] = [:]
    /// Sequence → publishes of it not acknowledged yet.
    private var outstanding: [Int: Int] = [:]
    /// Sequences of which the broker refused a publish.
    private var failed: Set<Int> = []

    private static let libraryInitialized: Void = { mosquitto_lib_init() }()

    /// Creates the handles (not connected yet): members `0..<ledger.online` online, the rest
    /// offline.
    init(mode: Mode, clientPrefix: String, topicPrefix: String, ledger: GroupLedger, window: Int, size: Int, qos: Int) throws {
        _ = Self.libraryInitialized
        self.mode = mode
        self.ledger = ledger
        self.window = window
        self.size = size
        self.qos = Int32(qos)
        guard let publisherHandle = mosquitto_new("\(clientPrefix)-pub", true, nil) else {
            throw BenchError("raw group path: mosquitto_new failed (errno \(errno))")
        }
        publisher = RawClient(handle: publisherHandle, member: nil, topic: "\(topicPrefix)/g")
        var members: [RawClient] = []
        for member in 0..<(ledger.online + ledger.offline) {
            // Offline members keep their session between connections: clean start off.
            guard let handle = mosquitto_new("\(clientPrefix)-m\(member)", member < ledger.online, nil) else {
                for client in members { mosquitto_destroy(client.handle) }
                mosquitto_destroy(publisherHandle)
                throw BenchError("raw group path: mosquitto_new failed (errno \(errno))")
            }
            members.append(RawClient(handle: handle, member: member, topic: mode == .fanOut ? "\(topicPrefix)/g" : "\(topicPrefix)/u/\(member)"))
        }
        self.members = members
        for client in [publisher] + members {
            client.owner = self
            mosquitto_user_data_set(client.handle, Unmanaged.passUnretained(client).toOpaque())
            mosquitto_int_option(client.handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5)
            mosquitto_connect_v5_callback_set(client.handle, Self.onConnect)
        }
        mosquitto_publish_v5_callback_set(publisher.handle, Self.onPublish)
        for client in members {
            mosquitto_subscribe_v5_callback_set(client.handle, Self.onSubscribe)
            mosquitto_message_v5_callback_set(client.handle, Self.onMessage)
        }
    }

    deinit {
        for client in [publisher] + members { mosquitto_destroy(client.handle) }
    }

    /// Connects every handle (members with `receiveMaximum`, as the gateway's sessions have;
    /// offline ones with a session that outlives the connection), starts the loop thread,
    /// subscribes the members, and returns once the broker confirmed all.
    func connect(to broker: BrokerAddress, receiveMaximum: Int) async throws {
        var online: OpaquePointer?
        mosquitto_property_add_int16(&online, Int32(MQTT_PROP_RECEIVE_MAXIMUM.rawValue), UInt16(clamping: receiveMaximum))
        var persistent: OpaquePointer?
        mosquitto_property_add_int16(&persistent, Int32(MQTT_PROP_RECEIVE_MAXIMUM.rawValue), UInt16(clamping: receiveMaximum))
        mosquitto_property_add_int32(&persistent, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), 3600)
        defer {
            mosquitto_property_free_all(&online)
            mosquitto_property_free_all(&persistent)
        }
        for client in [publisher] + members {
            let properties = client.member.map { $0 < ledger.online ? online : persistent } ?? nil
            // A blocking TCP connect (numeric loopback address: no resolver wait).
            broker.authenticate(client.handle)
            let rc = mosquitto_connect_bind_v5(client.handle, broker.host, Int32(broker.port), 60, nil, properties)
            guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                throw BenchError("raw group path: cannot connect to \(broker): \(String(cString: mosquitto_strerror(rc)))")
            }
        }
        thread.start(name: "imbench-raw") { [self] in loop() }
        try await thread.waitUntil(within: 30, timedOut: BenchError("raw group path: no CONNACK or SUBACK within 30 s")) { control in
            if let refusal = control.refusal { throw BenchError("raw group path: \(refusal)") }
            return control.ready == 1 + self.members.count
        }
    }

    /// Disconnects the offline members (their sessions stay on the broker) and returns once
    /// they are gone.
    func takeOffline() async throws {
        thread.shared.withLock { $0.takeOffline = true }
        wake()
        try await thread.waitUntil(within: 10, timedOut: BenchError("raw group path: no DISCONNECT of the offline members within 10 s")) { $0.offlineDown }
    }

    /// Reconnects the offline members: what the broker queued for them arrives.
    func bringOfflineBack() {
        thread.shared.withLock { $0.bringBack = true }
        wake()
    }

    /// Starts publishing (the window fills).
    func start() {
        thread.shared.withLock { $0.running = true }
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
        let clients = [publisher] + members
        let handles = clients.map(\.handle)
        let offline = members.dropFirst(ledger.online)
        var fds: [pollfd] = []
        var nextMisc = MonotonicClock.nanoseconds() + 1_000_000_000
        var disconnecting = false
        var offlineState = (down: false, back: false)
        while true {
            let request = thread.shared.withLock { $0 }
            loopRunning = request.running && !request.stopping
            if request.takeOffline && !offlineState.down {
                offlineState.down = true
                for client in offline { mosquitto_disconnect_v5(client.handle, 0, nil) }
            }
            if offlineState.down && !request.offlineDown && offline.allSatisfy({ mosquitto_socket($0.handle) < 0 }) {
                thread.shared.withLock { $0.offlineDown = true }
            }
            if request.bringBack && !offlineState.back {
                offlineState.back = true
                // Blocking TCP connects on loopback; clean start off: the session resumes.
                for client in offline { mosquitto_reconnect(client.handle) }
            }
            if request.stopping && !disconnecting {
                disconnecting = true
                for handle in handles where mosquitto_socket(handle) >= 0 { mosquitto_disconnect_v5(handle, 0, nil) }
            }
            if disconnecting && handles.allSatisfy({ mosquitto_socket($0) < 0 || !mosquitto_want_write($0) }) { break }
            if loopRunning { pump() }
            RawLoopRound.run(handles, fds: &fds, wakeFD: thread.wakeFD, timeoutMilliseconds: 100)
            if MonotonicClock.nanoseconds() >= nextMisc {
                for handle in handles where mosquitto_socket(handle) >= 0 { mosquitto_loop_misc(handle) }
                nextMisc = MonotonicClock.nanoseconds() + 1_000_000_000
            }
        }
    }

    /// Publishes the messages the window allows now (on the loop thread): per member, one
    /// publish to each member's topic; fanned out, one to the group's.
    private func pump() {
        while inflight < window {
            lastSequence += 1
            let sequence = lastSequence
            let payload = BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: size)
            ledger.sent(pair: 0)
            inflight += 1
            let targets = mode == .fanOut ? [publisher.topic] : members.map(\.topic)
            outstanding[sequence] = targets.count
            for topic in targets {
                var mid: Int32 = 0
                let rc = payload.withUnsafeBytes { bytes in
                    mosquitto_publish_v5(publisher.handle, &mid, topic, Int32(bytes.count), bytes.baseAddress, qos, false, nil)
                }
                if rc == MOSQ_ERR_SUCCESS.rawValue {
                    pending[mid] = sequence
                } else {
                    if failed.insert(sequence).inserted {
                        ledger.refused(pair: 0, reason: "mosquitto_publish_v5: \(String(cString: mosquitto_strerror(rc)))")
                    }
                    published(sequence)
                }
            }
        }
    }

    /// One publish of message `sequence` is done (acknowledged, refused or failed); after the
    /// last, the message counts as ACKed unless one was refused.
    private func published(_ sequence: Int) {
        guard let left = outstanding[sequence] else { return }
        if left > 1 {
            outstanding[sequence] = left - 1
            return
        }
        outstanding[sequence] = nil
        if failed.remove(sequence) != nil {
            freed()
        } else if ledger.acked(pair: 0, sequence: sequence) {
            freed()
        }
    }

    /// A message's slot is free: publish the next one if running.
    private func freed() {
        inflight -= 1
        if loopRunning { pump() }
    }

    // MARK: Callbacks (on the loop thread)

    private static func client(_ userdata: UnsafeMutableRawPointer?) -> RawClient? {
        userdata.map { Unmanaged<RawClient>.fromOpaque($0).takeUnretainedValue() }
    }

    private static let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
        _, userdata, reason, _, _ in
        guard let client = client(userdata), let owner = client.owner else { return }
        if reason != 0 {
            owner.thread.shared.withLock { $0.refusal = "the broker refused the connection (reason \(reason))" }
            return
        }
        // Offline members coming back resume their session: nothing to subscribe.
        guard !client.connected else { return }
        client.connected = true
        guard client.member != nil else {
            owner.thread.shared.withLock { $0.ready += 1 }
            return
        }
        let rc = mosquitto_subscribe_v5(client.handle, nil, client.topic, owner.qos, 0, nil)
        if rc != MOSQ_ERR_SUCCESS.rawValue {
            owner.thread.shared.withLock { $0.refusal = "subscribe: \(String(cString: mosquitto_strerror(rc)))" }
        }
    }

    private static let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?, OpaquePointer?) -> Void = {
        _, userdata, _, count, granted, _ in
        guard let client = client(userdata), let owner = client.owner else { return }
        if count < 1 || (granted?.pointee ?? 0x80) >= 0x80 {
            owner.thread.shared.withLock { $0.refusal = "the broker refused the subscription to \(client.topic)" }
            return
        }
        owner.thread.shared.withLock { $0.ready += 1 }
    }

    private static let onPublish: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, OpaquePointer?) -> Void = {
        _, userdata, mid, reason, _ in
        guard let client = client(userdata), let owner = client.owner, let sequence = owner.pending.removeValue(forKey: mid) else { return }
        if reason >= 0x80, owner.failed.insert(sequence).inserted {
            owner.ledger.refused(pair: 0, reason: "broker reason 0x\(String(reason, radix: 16))")
        }
        owner.published(sequence)
    }

    private static let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?, OpaquePointer?) -> Void = {
        _, userdata, message, _ in
        guard let client = client(userdata), let owner = client.owner, let member = client.member, let message = message?.pointee,
              let bytes = message.payload
        else { return }
        let now = MonotonicClock.nanoseconds()
        guard let (sequence, sentAt) = BenchPayload.parse(UnsafeRawBufferPointer(start: bytes, count: Int(message.payloadlen))) else { return }
        if owner.ledger.received(pair: member, sequence: sequence, sentAt: sentAt, now: now) { owner.freed() }
    }
}
