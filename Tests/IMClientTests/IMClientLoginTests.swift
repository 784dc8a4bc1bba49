import IMWire
import Testing

@testable import IMClient

/// What IMClient's LOGIN says, from its configuration.
@Suite("IMClient LOGIN", .timeLimit(.minutes(1)))
struct IMClientLoginTests {
    @Test("receiptNotices: absent by default (on), RECEIPT_NOTICES = 0 when turned off", arguments: [true, false])
    func receiptNotices(on: Bool) async throws {
        let network = ScriptedNetwork()
        network.configuration.receiptNotices = on
        let client = Task { try await IMClient.connect(network.configuration, dialer: network.dialer) }
        let gateway = try await network.nextDial()
        let (frame, login) = try await gateway.login()
        #expect(login.receiptNotices == (on ? nil : false))
        #expect(try frame.fields()[.receiptNotices] == (on ? nil : TLVItem(tag: .receiptNotices, value: .init(bytes: [0]))))
        try await gateway.write(.loginOK(LoginOK(userID: "alice", deviceID: "phone", refSequence: frame.header.sequence)))
        try await client.value.close()
    }
}
