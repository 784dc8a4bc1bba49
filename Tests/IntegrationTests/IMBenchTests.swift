import Foundation
import Testing
import IMTestSupport

/// imbench's MQTT paths against a real broker: they measure what they claim to (every message
/// delivered once, CPU per message reported); no figure is asserted.
@Suite("imbench against a real broker", .stopsWhatItStarts, .serialized, .startsEjabberdNodes)
struct IMBenchTests {
    static var executable: String {
        URL(fileURLWithPath: IMGWProcess.executable).deletingLastPathComponent().appendingPathComponent("imbench").path
    }

    @Test("imbench mqtt: raw libmosquitto and each wrapper API deliver every message once, with CPU seconds per 1,000 messages")
    func mqtt() async throws {
        let broker = try await TestBroker.start()
        let output = try await run(
            Self.executable,
            ["mqtt", "--seconds", "1", "--rounds", "1", "--drain", "10", "--broker", "127.0.0.1:\(broker.port)"])
        let result = try Self.json(output)
        #expect(result["benchmark"] as? String == "mqtt")
        for api in ["raw", "publish", "start-publish", "callbacks"] {
            let phase = try #require(result[api] as? [String: Any], "no \(api) in \(output)")
            let sent = try #require(phase["sent"] as? Int)
            #expect(sent > 0, "\(api) sent nothing")
            #expect(phase["received"] as? Int == sent, "\(api): every message sent arrives")
            #expect(phase["lost"] as? Int == 0)
            #expect(phase["duplicates"] as? Int == 0)
            #expect(phase["refused"] as? Int == 0)
            #expect((phase["bench_cpu_s_per_1000"] as? Double ?? 0) > 0, "\(api): CPU per 1,000 messages")
            if api != "raw" { #expect(phase["ratio_to_raw"] is Double) }
        }
    }

    @Test("imbench chat --paths direct runs raw libmosquitto: every message once, CPU per 1,000 messages")
    func chatDirect() async throws {
        let broker = try await TestBroker.start()
        let output = try await run(
            Self.executable,
            ["chat", "--paths", "direct", "--seconds", "1", "--pairs", "2", "--drain", "10", "--broker", "127.0.0.1:\(broker.port)"])
        let result = try Self.json(output)
        let sent = try #require(result["direct_sent"] as? Int)
        #expect(sent > 0)
        #expect(result["direct_received"] as? Int == sent)
        #expect(result["direct_lost"] as? Int == 0)
        #expect(result["direct_duplicates"] as? Int == 0)
        #expect((result["direct_bench_cpu_s_per_1000"] as? Double ?? 0) > 0)
        #expect(output.contains("raw libmosquitto"), "the direct path says what it runs")
    }

    @Test("imbench chat against ejabberd (--broker with --broker-username, --broker-pid): both paths deliver every message once, with the broker's CPU")
    func chatOnEjabberd() async throws {
        let broker = try await TestEjabberd.start()
        let output = try await run(
            Self.executable,
            ["chat", "--seconds", "1", "--pairs", "2", "--drain", "10", "--broker", "127.0.0.1:\(broker.port)",
             "--broker-username", TestEjabberd.username, "--broker-password", TestEjabberd.password, "--broker-pid", "\(broker.process.pid)"])
        let result = try Self.json(output)
        for path in ["gateway", "direct"] {
            let sent = try #require(result["\(path)_sent"] as? Int)
            #expect(sent > 0, "\(path) sent nothing")
            #expect(result["\(path)_received"] as? Int == sent, "\(path): every message arrives")
            #expect((result["\(path)_broker_cpu_s_per_1000"] as? Double ?? 0) > 0, "\(path): the broker's CPU is measured")
        }
        #expect(result["lost"] as? Int == 0)
        #expect(result["direct_lost"] as? Int == 0)
    }

    @Test("imbench chat --duplex: devices that send and receive at once through a gateway; every message once")
    func chatDuplex() async throws {
        let output = try await run(
            Self.executable, ["chat", "--paths", "gateway", "--duplex", "--seconds", "1", "--pairs", "1", "--drain", "10"])
        let result = try Self.json(output)
        #expect(result["duplex"] as? Bool == true)
        #expect(result["pairs"] as? Int == 2, "one pair of devices carries two flows")
        let sent = try #require(result["gateway_sent"] as? Int)
        #expect(sent > 0)
        #expect(result["gateway_received"] as? Int == sent)
        #expect(result["lost"] as? Int == 0)
        #expect(result["duplicates"] as? Int == 0)
        #expect(output.contains("send and receive"), "the run says what it does")
    }

    @Test("imbench chat --transport websocket: the gateway's devices over WebSocket deliver every message once, raw libmosquitto beside them")
    func chatOverWebSocket() async throws {
        let output = try await run(
            Self.executable, ["chat", "--transport", "websocket", "--seconds", "1", "--pairs", "1", "--drain", "10"])
        let result = try Self.json(output)
        let sent = try #require(result["gateway_sent"] as? Int)
        #expect(sent > 0)
        #expect(result["gateway_received"] as? Int == sent)
        #expect(result["lost"] as? Int == 0)
        #expect(result["duplicates"] as? Int == 0)
        #expect(output.contains("devices connect over WebSocket: ws://127.0.0.1:"), "the run says how devices connect")
        let direct: Int = result["direct_msgs_per_s"] as? Int ?? 0
        #expect(direct > 0, "the raw path ran in the same run")
    }

    @Test("imbench chat --no-receipt-notices: the senders get no RECEIPT_NOTICE (by default, one per message)",
          arguments: [true, false])
    func chatReceiptNotices(_ notices: Bool) async throws {
        let output = try await run(
            Self.executable,
            ["chat", "--paths", "gateway", "--seconds", "1", "--pairs", "1", "--drain", "10", "--window", "8"]
                + (notices ? [] : ["--no-receipt-notices"]))
        let result = try Self.json(output)
        let received = try #require(result["gateway_received"] as? Int)
        #expect(received > 0)
        #expect(result["lost"] as? Int == 0)
        let count = try #require(result["gateway_receipt_notices"] as? Int)
        if notices {
            #expect(result["receipt_notices"] == nil)
            // Notices of the last messages may still be on their way when the run ends.
            #expect(count > received / 2)
        } else {
            #expect(result["receipt_notices"] as? Bool == false)
            #expect(count == 0)
        }
    }

    @Test("imbench chat --flooders: a device floods beside the pair; the pair loses nothing, the flood is counted")
    func chatFlooders() async throws {
        let output = try await run(
            Self.executable, ["chat", "--paths", "gateway", "--flooders", "1", "--flood-window", "2", "--rate", "20", "--seconds", "1", "--pairs", "1", "--drain", "10"])
        let result = try Self.json(output)
        #expect(result["flooders"] as? Int == 1)
        let sent = try #require(result["flood_sent"] as? Int)
        let accepted = try #require(result["flood_accepted"] as? Int)
        let refused = try #require(result["flood_refused"] as? Int)
        #expect(sent > 0 && accepted + refused <= sent && accepted + refused > 0)
        #expect(result["lost"] as? Int == 0)
        #expect((result["gateway_received"] as? Int ?? 0) > 0)
    }

    @Test("imbench group: through imgw, per member and fanned out by the broker, every online member gets every message once and every offline member its queue")
    func group() async throws {
        // 5 members: the sender, 3 online, 1 offline (25% of the 4 others).
        let output = try await run(
            Self.executable, ["group", "--members", "5", "--offline-percent", "25", "--seconds", "1", "--window", "4", "--drain", "20"])
        let result = try Self.json(output)
        #expect(result["benchmark"] as? String == "group")
        let groups = try #require(result["groups"] as? [[String: Any]])
        let group = try #require(groups.first)
        #expect(group["members"] as? Int == 5)
        #expect(group["online"] as? Int == 3)
        #expect(group["offline"] as? Int == 1)
        for path in ["gateway", "per_member", "fan_out"] {
            let figures = try #require(group[path] as? [String: Any], "no \(path) in \(output)")
            let acked = try #require(figures["acked"] as? Int)
            #expect(acked > 0, "\(path): messages were sent")
            #expect(figures["sent"] as? Int == acked, "\(path): every message ACKed")
            #expect(figures["delivered"] as? Int == 3 * acked, "\(path): each online member got each message")
            #expect(figures["lost"] as? Int == 0)
            #expect(figures["duplicates"] as? Int == 0)
            #expect(figures["offline_expected"] as? Int == acked)
            #expect(figures["offline_received"] as? Int == acked, "\(path): the offline member got its queue once back")
            #expect(figures["offline_out_of_order"] as? Int == 0)
            #expect(figures["catch_up_s"] is Double)
            #expect((figures["broker_cpu_s_per_1000"] as? Double ?? 0) > 0, "\(path): the broker's CPU per 1,000 deliveries")
        }
        #expect(group["gateway_over_per_member"] is Double)
        #expect(output.contains("raw libmosquitto"), "the raw paths say what they run")
    }

    @Test("imbench group refuses a group without an online member, and --gateway (it needs its own imgw's API)")
    func groupUsage() async throws {
        let (status, output) = try await runCapturing(Self.executable, ["group", "--members", "2", "--offline-percent", "60"])
        #expect(status != 0)
        #expect(output.contains("no online member"), "\(output)")
        let (gatewayStatus, gatewayOutput) = try await runCapturing(
            Self.executable, ["group", "--gateway", "127.0.0.1:1", "--secret", "s", "--broker", "127.0.0.1:1"])
        #expect(gatewayStatus != 0)
        #expect(gatewayOutput.contains("drop --gateway"), "\(gatewayOutput)")
    }

    /// The JSON line among imbench's output lines (stderr has the progress).
    static func json(_ output: String) throws -> [String: Any] {
        let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{\"benchmark\"") }, "no JSON line in: \(output)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }
}
