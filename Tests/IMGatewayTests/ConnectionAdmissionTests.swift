import Testing

@testable import IMGateway

@Suite("ConnectionAdmission")
struct ConnectionAdmissionTests {
    @Test("per address: the limit turns away the next one from that address only; a close makes room")
    func perAddress() {
        var admission = ConnectionAdmission(maxPerAddress: 2, maxAwaitingLogin: 0)
        #expect(admission.open(address: "10.0.0.1") == .admit)
        #expect(admission.open(address: "10.0.0.1") == .admit)
        let refused = admission.open(address: "10.0.0.1")
        #expect(refused == .refuse("too many connections from 10.0.0.1 (limits.max_connections_per_address 2)"))
        #expect(admission.open(address: "10.0.0.2") == .admit)
        admission.loggedIn()
        admission.closed(address: "10.0.0.1", loggedIn: true)
        #expect(admission.open(address: "10.0.0.1") == .admit)
        #expect(admission.perAddress == ["10.0.0.1": 2, "10.0.0.2": 1])
    }

    @Test("awaiting login: counted until LOGIN_OK or close; logged-in connections never count against it")
    func awaitingLogin() {
        var admission = ConnectionAdmission(maxPerAddress: 0, maxAwaitingLogin: 2)
        #expect(admission.open(address: "a") == .admit)
        #expect(admission.open(address: "b") == .admit)
        #expect(admission.open(address: "c") != .admit)
        admission.loggedIn()
        #expect(admission.open(address: "c") == .admit)
        admission.closed(address: "b", loggedIn: false)
        #expect(admission.awaitingLogin == 1)
        #expect(admission.open(address: "d") == .admit)
        // 0 and 0: no limits.
        var open = ConnectionAdmission(maxPerAddress: 0, maxAwaitingLogin: 0)
        for _ in 0..<5_000 { #expect(open.open(address: "x") == .admit) }
    }

    @Test("a ticket is counted once, and one that nobody closed gives its place back when it goes")
    func tickets() {
        var limits = GatewayConfiguration.LimitSettings()
        limits.maxConnectionsPerAddress = 1
        limits.maxConnectionsAwaitingLogin = 1
        let admissions = ConnectionAdmissions(limits)
        do {
            guard case .success(let ticket) = admissions.open(address: "10.0.0.1") else {
                Issue.record("the first connection was refused")
                return
            }
            guard case .failure = admissions.open(address: "10.0.0.2") else {
                Issue.record("a second connection awaiting login was admitted")
                return
            }
            ticket.closed()
            ticket.closed()
            #expect(admissions.current.awaitingLogin == 0 && admissions.current.perAddress.isEmpty)
        }
        // Dropped without closed(): its connection's handlers never took it.
        _ = admissions.open(address: "10.0.0.1")
        #expect(admissions.current.awaitingLogin == 0 && admissions.current.perAddress.isEmpty, "a dropped ticket kept its place")
        guard case .success = admissions.open(address: "10.0.0.1") else {
            Issue.record("refused after the dropped ticket")
            return
        }
    }
}
