import Foundation
import CMosquitto
import Testing

@testable import Mosquitto

/// Pure parts of the wrapper: no broker, no sockets.
@Suite("Mosquitto wrapper, pure parts")
struct MosquittoUnitTests {
    @Test("v5 properties survive a trip through a libmosquitto property list")
    func propertiesRoundTrip() throws {
        let properties = MQTTProperties(
            userProperties: [UserProperty("sender", "alice"), UserProperty("dup", "1"), UserProperty("dup", "2")],
            contentType: "application/json",
            messageExpiryInterval: 3600,
            responseTopic: "replies/alice",
            correlationData: [0, 1, 2, 250],
            payloadIsUTF8: true)
        var list = try properties.makeList()
        defer { mosquitto_property_free_all(&list) }
        #expect(list != nil)
        #expect(MQTTProperties(copying: list) == properties)
        #expect(properties[user: "dup"] == "1")
    }

    @Test("empty properties make no list")
    func emptyProperties() throws {
        #expect(try MQTTProperties().makeList() == nil)
        #expect(MQTTProperties().isEmpty)
    }

    @Test("on_disconnect codes: 0 normal, >= 0x80 broker reason, else libmosquitto error")
    func lossReasons() {
        #expect(LossReason(disconnectCode: 0) == .normal)
        #expect(LossReason(disconnectCode: 0x8E) == .broker(.sessionTakenOver))
        guard case .error(let code, let message) = LossReason(disconnectCode: 7) else {
            Issue.record("expected a libmosquitto error")
            return
        }
        #expect(code == 7)
        #expect(message.lowercased().contains("connection"))
        // A keepalive that passed unanswered: named, where libmosquitto 2.0.11 says "Unknown error.".
        guard case .error(19, let keepalive) = LossReason(disconnectCode: 19) else {
            Issue.record("expected a libmosquitto error")
            return
        }
        #expect(keepalive.contains("keepalive"))
        #expect(MosquittoError.text(of: 13) == String(cString: mosquitto_strerror(13)), "the library's own text where it has one")
    }

    @Test("v3.1.1 CONNACK codes map to their v5 reasons", arguments: [
        (Int32(1), UInt8(0x84)), (2, 0x85), (3, 0x88), (4, 0x86), (5, 0x87),
    ])
    func connackMapping(code: Int32, reason: UInt8) {
        #expect(MosquittoClient.connackReason(code, protocolVersion: .v311) == ReasonCode(reason))
    }

    @Test("v5 CONNACK reasons pass through")
    func connackV5() {
        #expect(MosquittoClient.connackReason(0x86, protocolVersion: .v5) == .badUsernameOrPassword)
        #expect(MosquittoClient.connackReason(0x9F, protocolVersion: .v5) == ReasonCode(0x9F))
    }

    @Test("subscribe options become MQTT_SUB_OPT bits")
    func subscribeOptions() {
        #expect(SubscribeOptions().mosquittoOptions == 0)
        #expect(SubscribeOptions(noLocal: true).mosquittoOptions == 0x04)
        #expect(SubscribeOptions(retainAsPublished: true, retainHandling: .sendIfNew).mosquittoOptions == 0x18)
        #expect(SubscribeOptions(noLocal: true, retainHandling: .doNotSend).mosquittoOptions == 0x24)
    }

    @Test("errors and reason codes say what happened")
    func descriptions() {
        #expect("\(ReasonCode.notAuthorized)".contains("0x87"))
        #expect("\(ReasonCode.notAuthorized)".lowercased().contains("not authorized"))
        #expect("\(MosquittoError.code(Int32(MOSQ_ERR_NO_CONN.rawValue)))".contains("libmosquitto error 4"))
        #expect("\(MosquittoError.connectionRefused(.badUsernameOrPassword))".contains("refused"))
        #expect(ReasonCode(0x10).isFailure == false)
        #expect(ReasonCode(0x80).isFailure)
    }

    @Test("the linked libmosquitto is the one whose headers the shims were compiled with (their private layouts are 2.0's); every internal is in use unless MOSQUITTO_SWIFT_INTERNALS=off, and none then")
    func libraryVersion() {
        #expect(MosquittoLibrary.version.major == Int(LIBMOSQUITTO_MAJOR) && MosquittoLibrary.version.minor == Int(LIBMOSQUITTO_MINOR),
                "linked \(MosquittoLibrary.version), compiled against \(LIBMOSQUITTO_MAJOR).\(LIBMOSQUITTO_MINOR)")
        #expect(MosquittoLibrary.compiledVersion / 1_000_000 == Int(LIBMOSQUITTO_MAJOR))
        let off = ProcessInfo.processInfo.environment[MosquittoLibrary.environmentVariable] == "off"
        #expect(MosquittoLibrary.internalsDisabled == off)
        // On this machine (libmosquitto 2.0, Linux x86_64 or aarch64) every one is in use
        // (AckThroughTests checks a redelivery carries the DUP flag, BatchedIOTests the hooks).
        #expect(MosquittoLibrary.internals == (off ? [] : Set(MosquittoLibrary.Internal.allCases)))
        #expect(MosquittoLibrary.canReadDupFlag == !off)
        #expect(!MosquittoLibrary.disableInternals() || off, "decided at first use: too late to turn them off now")
    }

    @Test("configuration defaults")
    func defaults() {
        let configuration = MosquittoClient.Configuration(clientID: "x")
        #expect(configuration.protocolVersion == .v5)
        #expect(configuration.keepalive == 60)
        #expect(configuration.cleanStart)
        #expect(configuration.acknowledgement == .automatic)
        #expect(configuration.maxInflightPublishes > 0)
    }

    @Test("connecting where no broker listens fails at once with a lost connection (what a login tries again after)")
    func nothingListens() async {
        let loop = MosquittoEventLoop(name: "unit-loop")
        defer { loop.shutdown() }
        let client = MosquittoClient(configuration: .init(clientID: "nobody-home", host: "127.0.0.1", port: 1), loop: loop)
        await #expect {
            _ = try await client.connect()
        } throws: { error in
            guard case MosquittoError.connectionLost(.error) = error else { return false }
            return true
        }
        await client.close()
    }

    @Test("a client runs on its loop's thread")
    func executor() async {
        let loop = MosquittoEventLoop(name: "unit-loop")
        defer { loop.shutdown() }
        #expect(loop.inLoop == false)
        #expect(await loop.submit { loop.inLoop })
        let client = MosquittoClient(configuration: .init(clientID: "exec"), loop: loop)
        #expect(await client.state == .idle)
        await client.close()
        #expect(await client.state == .closed)
        await #expect(throws: MosquittoError.closed) { try await client.connect() }
    }
}

@Suite("Mosquitto: libmosquitto's internal socketpair")
struct SocketPairsTests {
    @Test("the pair a fresh handle names is confirmed and taken away, without a descriptor scan; with the internals off, found by its descriptors and kept for the loop to drain")
    func headPairTaken() throws {
        let detaches = MosquittoLibrary.canDetachSocketPair
        #expect(detaches == !MosquittoLibrary.internalsDisabled, "libmosquitto 2.0 on this platform")
        let scansBefore = SocketPairs.scans.load(ordering: .relaxed)
        var handles: [(OpaquePointer, SocketPairs.Pair?)] = []
        for index in 0..<50 {
            let (handle, pair) = try SocketPairs.create { mosquitto_new("pair-\(index)", true, nil) }
            #expect((pair == nil) == detaches, "detached, nothing for a loop to drain (or found, when not detached)")
            handles.append((try #require(handle), pair))
        }
        // The counter is the process's: tests running alongside add their own scans (with the
        // internals off, every handle they create).
        let scans = SocketPairs.scans.load(ordering: .relaxed) - scansBefore
        #expect(detaches ? scans == 0 : scans >= 50, "\(scans) scans")
        for (handle, pair) in handles { SocketPairs.destroy(handle, pair: pair) }
    }
}
