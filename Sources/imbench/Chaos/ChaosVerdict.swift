/// Where a chat message goes: a user (one-to-one) or a group.
enum ChaosConversation: Sendable, Hashable, CustomStringConvertible {
    case user(String)
    case group(String)

    var description: String {
        switch self {
        case .user(let user): "@\(user)"
        case .group(let group): "#\(group)"
        }
    }
}

/// A chat message a device of the run sent (or tried to).
struct ChaosSend: Sendable, Hashable {
    enum Outcome: Sendable, Hashable {
        /// No answer yet.
        case pending
        /// ACKed: the gateway took responsibility for it.
        case acked
        /// Refused for good (a negative ACK that is not "later"), with the code.
        case refused(String)
        /// No answer: the client's send timeout passed, or the client ended (why).
        case unanswered(String)
    }

    var messageID: String
    /// The sending device (its index in the run) and its user.
    var device: Int
    var user: String
    var conversation: ChaosConversation
    /// 1, 2, 3... per sending device: a device sends its next message only after the last
    /// one's answer, so a recipient must see one device's messages of a conversation in this
    /// order.
    var sequence: Int
    var outcome: Outcome = .pending
    /// When it was sent and answered (the run's clock), for the trace.
    var sentAt: Double = 0
    var answeredAt: Double?
}

/// A chat message as one device's app saw it.
struct ChaosArrival: Sendable, Hashable {
    var messageID: String
    /// The sender's user id.
    var from: String
    var isCarbon: Bool
    /// For the trace: when (the run's clock), its offset in the device's stream, whether it
    /// came from the archive (a catch-up) rather than live.
    var at: Double = 0
    var offset: UInt64? = nil
    var archived = false
}

/// Who is who in the run: each device's user, and each group's members.
struct ChaosDirectory: Sendable {
    /// The user of device N.
    var deviceUsers: [String]
    /// The members of each group.
    var groups: [String: Set<String>]

    /// The devices of each user.
    var devicesOfUser: [String: [Int]] {
        var result: [String: [Int]] = [:]
        for (device, user) in deviceUsers.enumerated() { result[user, default: []].append(device) }
        return result
    }

    /// The devices that must get `send`: every device of the recipient (or of every member
    /// of the group), and the sender's other devices (carbons); never the sending device.
    func recipients(of send: ChaosSend, devicesOfUser: [String: [Int]]) -> Set<Int> {
        var users: Set<String> = [send.user]
        switch send.conversation {
        case .user(let user): users.insert(user)
        case .group(let group): users.formUnion(groups[group] ?? [])
        }
        var devices = Set(users.flatMap { devicesOfUser[$0] ?? [] })
        devices.remove(send.device)
        return devices
    }
}

/// The checker, in Jepsen's queue vocabulary, per recipient device: *lost* (ACKed to the
/// sender, never surfaced to the device's app by the end), *duplicated* (surfaced more than
/// once), *unexpected* (never sent, or surfaced to a device it was not for), *reordered*
/// (surfaced before a message its sending device sent earlier in the same conversation). Pure:
/// what was sent and what arrived in, the verdict out.
struct ChaosVerdict: Sendable {
    struct Delivery: Sendable, Hashable, CustomStringConvertible {
        var messageID: String
        var device: Int
        var note: String = ""
        var description: String { "\(messageID) → device \(device + 1)" + (note.isEmpty ? "" : " (\(note))") }
    }

    var sent = 0
    var acked = 0
    var refused: [String: Int] = [:]
    var unanswered: [String] = []
    var pending: [String] = []
    /// Deliveries owed (ACKed messages × their recipient devices) and how many were made.
    var owed = 0
    var delivered = 0
    /// Unacknowledged messages that were delivered anyway (fine either way).
    var unackedDelivered = 0
    var lost: [Delivery] = []
    var duplicated: [Delivery] = []
    var unexpected: [Delivery] = []
    var reordered: [Delivery] = []

    /// Whether the run kept every promise: nothing lost, duplicated, unexpected or
    /// reordered, and every message answered and taken. (Every message of the run is one the
    /// gateway must take: IMClient sends again what is refused with a retry time, so a refusal
    /// that reaches the app is one for good, and wrong.)
    var passed: Bool {
        lost.isEmpty && duplicated.isEmpty && unexpected.isEmpty && reordered.isEmpty && unanswered.isEmpty && pending.isEmpty
            && refused.isEmpty
    }

    /// `arrivals[n]`: what device N's app saw, in order, over every client it had.
    init(sends: [ChaosSend], arrivals: [[ChaosArrival]], directory: ChaosDirectory) {
        let devicesOfUser = directory.devicesOfUser
        var byID: [String: ChaosSend] = [:]
        for send in sends { byID[send.messageID] = send }
        sent = sends.count
        for send in sends {
            switch send.outcome {
            case .acked: acked += 1
            case .refused(let code): refused[code, default: 0] += 1
            case .unanswered(let why): unanswered.append("\(send.messageID): \(why)")
            case .pending: pending.append(send.messageID)
            }
        }
        var seen: [Int: Set<String>] = [:]
        for (device, list) in arrivals.enumerated() {
            var counts: [String: Int] = [:]
            // The highest sequence seen so far per (sending device, conversation).
            var highest: [String: (sequence: Int, messageID: String)] = [:]
            for arrival in list {
                counts[arrival.messageID, default: 0] += 1
                guard let send = byID[arrival.messageID] else {
                    if counts[arrival.messageID] == 1 {
                        unexpected.append(Delivery(messageID: arrival.messageID, device: device, note: "never sent"))
                    }
                    continue
                }
                guard counts[arrival.messageID] == 1 else { continue }
                guard directory.recipients(of: send, devicesOfUser: devicesOfUser).contains(device), arrival.from == send.user else {
                    unexpected.append(Delivery(messageID: arrival.messageID, device: device, note: "not for this device"))
                    continue
                }
                seen[device, default: []].insert(arrival.messageID)
                if send.outcome != .acked { unackedDelivered += 1 }
                let key = "\(send.device)|\(send.conversation)"
                if let last = highest[key], last.sequence > send.sequence {
                    reordered.append(Delivery(messageID: send.messageID, device: device, note: "after \(last.messageID)"))
                } else {
                    highest[key] = (send.sequence, send.messageID)
                }
            }
            for (messageID, count) in counts.sorted(by: { $0.key < $1.key }) where count > 1 {
                duplicated.append(Delivery(messageID: messageID, device: device, note: "\(count) times"))
            }
        }
        for send in sends where send.outcome == .acked {
            for device in directory.recipients(of: send, devicesOfUser: devicesOfUser).sorted() {
                owed += 1
                if seen[device]?.contains(send.messageID) == true {
                    delivered += 1
                } else {
                    lost.append(Delivery(messageID: send.messageID, device: device))
                }
            }
        }
    }
}
