import Testing

@testable import imbench

/// The chaos run's checker, on hand-made histories: each kind of anomaly is found, and a clean
/// history passes.
@Suite("imbench chaos: the checker")
struct ChaosVerdictTests {
    /// alice has two devices (0, 1), bob one (2), carol one (3); group g: alice and bob.
    let directory = ChaosDirectory(deviceUsers: ["alice", "alice", "bob", "carol"], groups: ["g": ["alice", "bob"]])

    func send(_ id: String, device: Int = 0, to conversation: ChaosConversation = .user("bob"), _ sequence: Int, _ outcome: ChaosSend.Outcome = .acked) -> ChaosSend {
        ChaosSend(messageID: id, device: device, user: directory.deviceUsers[device], conversation: conversation, sequence: sequence, outcome: outcome)
    }

    func arrival(_ id: String, from: String = "alice", carbon: Bool = false) -> ChaosArrival {
        ChaosArrival(messageID: id, from: from, isCarbon: carbon)
    }

    @Test("recipients: the peer's devices and the sender's other devices (carbons), a group's members, never the sender")
    func recipients() {
        let users = directory.devicesOfUser
        #expect(directory.recipients(of: send("a", to: .user("bob"), 1), devicesOfUser: users) == [1, 2])
        #expect(directory.recipients(of: send("b", device: 2, to: .user("carol"), 1), devicesOfUser: users) == [3])
        #expect(directory.recipients(of: send("c", device: 1, to: .group("g"), 1), devicesOfUser: users) == [0, 2])
    }

    @Test("a clean history passes; its deliveries are counted")
    func clean() {
        let sends = [send("m1", 1), send("m2", 2)]
        let verdict = ChaosVerdict(
            sends: sends,
            arrivals: [[], [arrival("m1", carbon: true), arrival("m2", carbon: true)], [arrival("m1"), arrival("m2")], []],
            directory: directory)
        #expect(verdict.passed)
        #expect(verdict.owed == 4 && verdict.delivered == 4 && verdict.acked == 2)
    }

    @Test("each anomaly is found: lost, duplicated, unexpected (never sent, or not for the device), reordered, unanswered, refused")
    func anomalies() {
        let sends = [
            send("m1", 1), send("m2", 2), send("m3", 3),
            send("x", device: 2, to: .user("carol"), 1, .unanswered("no answer within the send timeout")),
            send("y", device: 3, to: .user("bob"), 1, .refused("FORBIDDEN (203)")),
        ]
        let verdict = ChaosVerdict(
            sends: sends,
            arrivals: [
                [arrival("ghost")],
                // alice's other device: m3 before m2 (sent after it), m1 missing.
                [arrival("m3", carbon: true), arrival("m2", carbon: true)],
                // bob: m1 twice, m2 and m3.
                [arrival("m1"), arrival("m1"), arrival("m2"), arrival("m3")],
                // carol: alice's message to bob is not hers.
                [arrival("m1")],
            ],
            directory: directory)
        #expect(!verdict.passed)
        #expect(verdict.lost.map(\.description) == ["m1 → device 2"])
        #expect(verdict.duplicated.map(\.messageID) == ["m1"] && verdict.duplicated.first?.device == 2)
        #expect(Set(verdict.unexpected.map(\.note)) == ["never sent", "not for this device"])
        #expect(verdict.reordered.map(\.description) == ["m2 → device 2 (after m3)"])
        #expect(verdict.unanswered.count == 1 && verdict.refused == ["FORBIDDEN (203)": 1])
    }

    @Test("a message whose sender got no ACK may arrive or not: neither is an anomaly")
    func unacknowledged() {
        let sends = [send("m1", 1, .unanswered("closed")), send("m2", 2, .unanswered("closed"))]
        let verdict = ChaosVerdict(sends: sends, arrivals: [[], [arrival("m1", carbon: true)], [], []], directory: directory)
        #expect(verdict.lost.isEmpty && verdict.unexpected.isEmpty && verdict.unackedDelivered == 1)
    }
}

@Suite("imbench chaos: the schedule and the recovery times")
struct ChaosScheduleTests {
    @Test("the same seed gives the same schedule; another seed another; faults stay within the run, in time order, on existing targets")
    func seeded() {
        let settings = ChaosSchedule.Settings(seconds: 600, gateways: 2, devices: 40)
        let first = ChaosSchedule(seed: 42, settings)
        #expect(first == ChaosSchedule(seed: 42, settings))
        #expect(first != ChaosSchedule(seed: 43, settings))
        #expect(first.faults.count > 100)
        #expect(first.faults.allSatisfy { $0.at >= 0 && $0.at < 600 })
        #expect(zip(first.faults, first.faults.dropFirst()).allSatisfy { $0.at <= $1.at })
        for planned in first.faults {
            switch planned.fault {
            case .killGateway(let index), .killGatewayAndBroker(let index), .pauseGateway(let index), .cutBrokerLink(let index),
                .stallBrokerLink(let index):
                #expect((0..<2).contains(index))
            case .cutDevice(let index), .stallDevice(let index), .deviceOffline(let index):
                #expect((0..<40).contains(index))
            case .killBroker, .pauseBroker, .pauseDatabase, .killDatabase:
                break
            }
        }
        // Every kind comes up in ten minutes, and some faults overlap.
        let kinds = Set(first.faults.map { "\($0.fault)".split(separator: " ").prefix(2).joined(separator: " ") })
        #expect(kinds.count >= 8)
        #expect(zip(first.faults, first.faults.dropFirst()).contains { $0.at + $0.duration > $1.at })
    }

    @Test("only the kinds asked for; none: no fault")
    func kinds() {
        let only = ChaosSchedule(seed: 1, .init(seconds: 120, gateways: 2, devices: 10, kinds: [.killBroker]))
        #expect(!only.faults.isEmpty && only.faults.allSatisfy { $0.fault == .killBroker })
        #expect(ChaosSchedule(seed: 1, .init(seconds: 120, gateways: 2, devices: 10, kinds: [])).faults.isEmpty)
    }

    @Test("a device is measured from the last recovery within its time offline (its own faults and the cluster's), else from going down")
    func recovery() {
        let windows = [
            ChaosRecovery.Window(start: 10, end: 12, device: nil, fault: "kill -9 broker"),
            ChaosRecovery.Window(start: 11, end: 13.5, device: 1, fault: "stall device 2's link"),
            ChaosRecovery.Window(start: 30, end: 40, device: nil, fault: "SIGSTOP gateway 1"),
        ]
        let spells = [
            ChaosRecovery.Spell(device: 0, down: 10.1, up: 12.5),
            ChaosRecovery.Spell(device: 1, down: 10.1, up: 14),
            ChaosRecovery.Spell(device: 0, down: 20, up: 21),
            // Back on the other gateway while the stopped one still is: measured from going down.
            ChaosRecovery.Spell(device: 2, down: 31, up: 32),
        ]
        let backs = ChaosRecovery.backTimes(spells, windows)
        #expect(backs.map(\.seconds) == [0.5, 0.5, 1, 1])
        #expect(backs.map(\.after) == ["kill -9 broker", "stall device 2's link", nil, nil])
    }
}
