@testable import IMGateway
import IMArchive
import IMWire
import Mosquitto
import NIOCore
import Synchronization

/// A clock a test moves by hand: the monotonic time and the wall clock move together.
final class ManualClock: ConnectionClock {
    private let state: Mutex<(now: NIODeadline, wall: UInt64)>

    /// A clock at `start` (monotonic) and `wall` (Unix ms).
    init(start: NIODeadline = .uptimeNanoseconds(1_000_000_000_000), wall: UInt64 = 1_767_225_600_000) {
        state = Mutex((start, wall))
    }

    var now: NIODeadline { state.withLock { $0.now } }
    var wallMilliseconds: UInt64 { state.withLock { $0.wall } }

    /// Moves both clocks on by `amount`.
    func advance(by amount: TimeAmount) {
        state.withLock { state in
            state.now = state.now + amount
            state.wall += UInt64(amount.nanoseconds / 1_000_000)
        }
    }
}

/// A ``ConnectionStateMachine`` on a ``ManualClock``, driven by frames and mail as a device
/// connection would drive it; what it does is read back as ``summary`` lines.
struct MachineHarness {
    typealias Machine = ConnectionStateMachine

    static let limits = Machine.Limits(
        loginTimeout: .seconds(10), idleTimeout: .seconds(90), deliveryAckTimeout: .seconds(30), tokenLeeway: .seconds(30),
        maxInFlight: 4, chatRate: 0, chatBurst: 1, locationRate: 1, heartbeatInterval: 30)
    static let topics = GatewayTopics(prefix: "im", pubsubSpace: "t")

    let clock: ManualClock
    let statistics = GatewayStatistics()
    var machine: Machine
    /// The device's MQTT session (for the login's outcome and its loss).
    let session: FakeDeviceSession
    /// The device's frame sequence numbers.
    private(set) var sequence: UInt32 = 0

    init(limits: Machine.Limits = Self.limits, user: String = "alice", device: String = "phone") {
        clock = ManualClock()
        machine = Machine(limits: limits, clock: clock, statistics: statistics)
        session = FakeDeviceSession(user: user, device: device, receiptNotices: true, topics: Self.topics)
        _ = machine.handle(.opened)
    }

    /// A frame of the device's, with its next sequence number (or `sequence`).
    mutating func frame(_ message: IMMessage, sequence: UInt32? = nil, sessionID: UInt16 = 9) -> IMFrame {
        let number = sequence ?? { self.sequence += 1; return self.sequence }()
        return message.frame(sequence: number, timestamp: 0, sessionID: sessionID)
    }

    /// Sends `message` from the device, in a read burst of its own; returns what the machine
    /// did (for the frame, then for the end of the burst).
    @discardableResult
    mutating func send(_ message: IMMessage, sequence: UInt32? = nil, sessionID: UInt16 = 9) -> [ConnectionAction] {
        let frame = self.frame(message, sequence: sequence, sessionID: sessionID)
        return machine.handle(.frame(frame)) + machine.handle(.readComplete)
    }

    /// Mail for the machine.
    @discardableResult
    mutating func mail(_ mail: ConnectionMailbox.Mail...) -> [ConnectionAction] {
        machine.handle(.mail(mail))
    }

    /// The login's outcome: the session opened, the token valid for `validFor`.
    func opened(resumed: Bool = false, validFor seconds: UInt64 = 3600, sync: LoginSync? = nil) -> ConnectionMailbox.Mail {
        .loginFinished(.opened(OpenedSession(
            session: session, registration: 1, brokerFit: BrokerFit(BrokerCapabilities(), broker: GatewayConfiguration.defaults.broker),
            resumed: resumed, expiresAt: clock.wallMilliseconds + seconds * 1000, sync: sync)))
    }

    /// LOGIN, then the login's outcome: logged in.
    mutating func logIn(carbons: Bool? = nil, position: StreamPosition? = nil, validFor seconds: UInt64 = 3600, sync: LoginSync? = nil) -> [ConnectionAction] {
        send(.login(LoginRequest(token: "token", deviceID: session.device, carbons: carbons, position: position)))
        return mail(opened(validFor: seconds, sync: sync))
    }

    /// Moves the clock on and fires the timer.
    @discardableResult
    mutating func advance(by amount: TimeAmount) -> [ConnectionAction] {
        clock.advance(by: amount)
        return machine.handle(.timerFired)
    }

    /// A chat message from the broker for `recipient`'s inbox.
    static func chatMessage(
        from sender: String, to recipient: String, id: String, deliveryID: UInt64, offset: UInt64? = nil, epoch: UInt64? = nil
    ) -> ConnectionMailbox.Mail {
        var payload = ChatPayload(send: ChatSend(to: recipient, messageID: id, content: .text("hi")), from: sender, serverTime: 1)
        payload.offset = offset
        payload.epoch = epoch
        let message = MosquittoMessage(topic: "im/u/\(recipient)/inbox", payload: PayloadCodec.encode(payload), qos: .atLeastOnce, deliveryID: deliveryID)
        return .message(message, topics.classify(message.topic))
    }
}

extension ConnectionAction {
    /// A short line saying what the action is, for comparisons (frames by their message).
    var summary: String {
        switch self {
        case .write(let frame): "write \(Self.describe(frame))"
        case .answerHello(let header, _, _): "answerHello #\(header.sequence)"
        case .close(let farewell): farewell.map { "close \(Self.describe($0))" } ?? "close"
        case .read: "read"
        case .armTimer: "armTimer"
        case .cancelTimer: "cancelTimer"
        case .startLogin: "startLogin"
        case .abandonLogin(let reason): "abandonLogin \(reason)"
        case .sessionOpened: "sessionOpened"
        case .loggedIn(let user, let device, let resumed): "loggedIn \(user)/\(device)\(resumed ? " resumed" : "")"
        case .uplink(let work):
            "uplink acks=\(work.acknowledgements) receipts=\(work.receipts.map { "\($0.sender):\($0.ids.joined(separator: ","))" }) probes=\(work.probes.count)"
        case .accept(let chats): "accept \(chats.map(\.ticket.messageID))"
        case .lookUpGroup(let group): "lookUpGroup \(group)"
        case .request(let job, let header): "request \(job) #\(header.sequence)"
        case .verifyToken(_, let header): "verifyToken #\(header.sequence)"
        case .readArchive(let read): "readArchive \(read.after)...\(read.through)\(read.isRepair ? " repair" : "")"
        case .readStreamBounds(let needsStart, _, let header): "readStreamBounds\(needsStart ? " start" : "")\(header.map { " #\($0.sequence)" } ?? "")"
        case .savePosition(let offset, let promptly): "savePosition \(offset)\(promptly ? " promptly" : "")"
        case .endSession(let reason): "endSession \(reason)"
        case .whenFinished: "whenFinished"
        case .finish: "finish"
        case .log(let level, let message, _): "log \(level) \(message)"
        }
    }

    /// Timer and log actions: left out of the comparisons that are not about them.
    var isBookkeeping: Bool {
        switch self {
        case .armTimer, .cancelTimer, .log: true
        default: false
        }
    }

    /// An error code's name, as the protocol writes it (`BAD_REQUEST`).
    static func name(_ code: IMErrorCode) -> String {
        String("\(code)".prefix { $0 != " " })
    }

    static func describe(_ frame: IMFrame) -> String {
        guard let message = try? IMMessage(frame: frame) else { return "undecodable \(frame.header.type)" }
        switch message {
        case .ack(let ack):
            var line = "ACK #\(ack.sequence)"
            if let error = ack.error { line += " \(Self.name(error))" }
            if let offset = ack.streamOffset { line += " offset=\(offset)" }
            return line
        case .kick(let kick): return "KICK \(Self.name(kick.reason))"
        case .error(let notice): return "ERROR \(Self.name(notice.code))\(notice.refSequence.map { " ref=\($0)" } ?? "")"
        case .loginOK: return "LOGIN_OK"
        case .delivery(let delivery):
            return "DELIVERY \(delivery.messageID)\(delivery.streamOffset.map { " offset=\($0)" } ?? "")\(delivery.archived ? " archived" : "")"
        default: return "\(message.body.map { type(of: $0).operation.description } ?? "\(frame.header.type)")"
        }
    }
}

extension Array where Element == ConnectionAction {
    /// The summaries, without timers and logs.
    var lines: [String] { filter { !$0.isBookkeeping }.map(\.summary) }
}
