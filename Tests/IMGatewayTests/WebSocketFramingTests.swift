import NIOCore
import NIOWebSocket
import Testing

@testable import IMGateway

@Suite("WebSocketFraming: RFC 6455 for a device's frames")
struct WebSocketFramingTests {
    let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
    let key = WebSocketMaskingKey([1, 2, 3, 4])!

    func frame(_ opcode: WebSocketOpcode, fin: Bool = true, masked: Bool = true, rsv1: Bool = false, _ bytes: [UInt8] = []) -> WebSocketFrame {
        // As on the wire: a masked frame's data is masked.
        var data = ByteBuffer(bytes: bytes)
        if masked { data.webSocketMask(key) }
        return WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: masked ? key : nil, data: data)
    }

    @Test("binary messages, fragmented or not, are delivered; interleaved pings are answered")
    func binaryAndFragments() {
        var framing = WebSocketFraming()
        #expect(framing.received(frame(.binary, [1, 2]), now: now) == .deliver)
        #expect(framing.received(frame(.binary, fin: false, [3]), now: now) == .deliver)
        #expect(framing.received(frame(.ping, [9]), now: now) == .pong)
        #expect(framing.received(frame(.continuation, fin: false, [4]), now: now) == .deliver)
        #expect(framing.received(frame(.continuation, [5]), now: now) == .deliver)
        #expect(framing.received(frame(.pong), now: now) == .ignore)
        #expect(framing.received(frame(.binary, [6]), now: now) == .deliver)
        #expect(!framing.closing)
    }

    @Test("violations close with their codes, and nothing is taken after")
    func violations() {
        let cases: [(WebSocketFrame, WebSocketErrorCode)] = [
            (frame(.binary, masked: false, [1]), .protocolError),
            (frame(.binary, rsv1: true, [1]), .protocolError),
            (frame(.continuation, [1]), .protocolError),
            (frame(.text, Array("hi".utf8)), .unacceptableData),
            (frame(WebSocketOpcode(encodedWebSocketOpcode: 3)!, [1]), .protocolError),
        ]
        for (bad, code) in cases {
            var framing = WebSocketFraming()
            guard case .close(let closed, _) = framing.received(bad, now: now) else {
                Issue.record("\(bad.opcode) was not refused")
                continue
            }
            #expect(closed == code, "\(bad.opcode)")
            #expect(framing.closing)
            #expect(framing.received(frame(.binary, [1]), now: now) == .ignore)
            #expect(framing.closeRequested() == .ignore)
        }
        var framing = WebSocketFraming()
        #expect(framing.received(frame(.binary, fin: false, [1]), now: now) == .deliver)
        guard case .close(.protocolError, _) = framing.received(frame(.binary, [2]), now: now) else {
            Issue.record("a new message inside a fragmented one was taken")
            return
        }
    }

    @Test("a ping flood: ten pings a second are answered, the eleventh closes with 1008; a new second starts again")
    func pingFlood() {
        var framing = WebSocketFraming()
        for _ in 0..<WebSocketFraming.maxPingsPerSecond {
            #expect(framing.received(frame(.ping), now: now) == .pong)
        }
        var calm = framing
        #expect(calm.received(frame(.ping), now: now + .seconds(1)) == .pong)
        guard case .close(.policyViolation, _) = framing.received(frame(.ping), now: now + .milliseconds(999)) else {
            Issue.record("the eleventh ping within a second was answered")
            return
        }
    }

    @Test("a close frame is echoed with its code; codes that may not be sent, and bad payloads, are 1002")
    func closing() {
        func closeFrame(_ code: UInt16?, _ reason: [UInt8] = []) -> WebSocketFrame {
            var bytes: [UInt8] = []
            if let code { bytes = [UInt8(code >> 8), UInt8(code & 0xFF)] }
            return frame(.connectionClose, bytes + reason)
        }
        func answer(_ frame: WebSocketFrame) -> WebSocketErrorCode? {
            var framing = WebSocketFraming()
            guard case .close(let code, _) = framing.received(frame, now: now) else { return nil }
            return code
        }
        #expect(answer(closeFrame(1000)) == .normalClosure)
        #expect(answer(closeFrame(1001, Array("bye".utf8))) == .goingAway)
        #expect(answer(closeFrame(4000)) == WebSocketErrorCode(codeNumber: 4000))
        #expect(answer(closeFrame(nil)) == .normalClosure)
        #expect(answer(closeFrame(1005)) == .protocolError)
        #expect(answer(closeFrame(1006)) == .protocolError)
        #expect(answer(closeFrame(999)) == .protocolError)
        #expect(answer(closeFrame(1000, [0xC3, 0x28])) == .protocolError)
        #expect(answer(frame(.connectionClose, [3])) == .protocolError)
    }

    @Test("closing from the gateway's side: 1000, or 1001 once shutdown began; once")
    func gatewayCloses() {
        var framing = WebSocketFraming()
        #expect(framing.closeRequested() == .close(.normalClosure, ""))
        #expect(framing.closeRequested() == .ignore)
        var shutdown = WebSocketFraming()
        shutdown.goingAway = true
        guard case .close(.goingAway, _) = shutdown.closeRequested() else {
            Issue.record("shutdown did not say going away")
            return
        }
    }

    @Test("the frame decoder's errors: too large is 1009, bad control frames 1002")
    func decoderErrors() {
        var framing = WebSocketFraming()
        guard case .close(.messageTooLarge, _) = framing.decodingFailed(.invalidFrameLength) else {
            Issue.record("a frame over the limit was not 1009")
            return
        }
        var control = WebSocketFraming()
        guard case .close(.protocolError, _) = control.decodingFailed(.fragmentedControlFrame) else {
            Issue.record("a fragmented control frame was not 1002")
            return
        }
    }
}

@Suite("WebSocketUpgradePolicy: path, origin, subprotocol")
struct WebSocketUpgradePolicyTests {
    func policy(_ origins: [String] = [], tls: Bool = false) -> WebSocketUpgradePolicy {
        WebSocketUpgradePolicy(settings: .init(enabled: true, path: "/im", allowedOrigins: origins), tls: tls)
    }

    func request(_ target: String = "/im", origin: String? = nil, host: String? = "gw.example.com:6980", protocols: [String] = ["imgw.tlv.v1"])
        -> WebSocketUpgradePolicy.Request
    {
        .init(target: target, origin: origin, host: host, protocols: protocols)
    }

    func status(_ decision: WebSocketUpgradePolicy.Decision) -> Int {
        if case .refuse(let status, _, _) = decision { return status }
        return 101
    }

    @Test("the path, with or without a query; another path is 404")
    func path() {
        #expect(policy().decide(request()) == .accept(subprotocol: "imgw.tlv.v1"))
        #expect(status(policy().decide(request("/im?x=1"))) == 101)
        #expect(status(policy().decide(request("/other"))) == 404)
        #expect(status(policy().decide(request("/im/"))) == 404)
    }

    @Test("origins: none (not a browser), the listener's own, listed ones, *; others are 403")
    func origins() {
        #expect(status(policy().decide(request(origin: nil))) == 101)
        #expect(status(policy().decide(request(origin: "http://gw.example.com:6980"))) == 101)
        #expect(status(policy().decide(request(origin: "HTTP://GW.example.com:6980"))) == 101)
        #expect(status(policy(tls: true).decide(request(origin: "http://gw.example.com:6980"))) == 403)
        #expect(status(policy().decide(request(origin: "http://evil.example.com"))) == 403)
        #expect(status(policy().decide(request(origin: "null"))) == 403)
        #expect(status(policy(["https://app.example.com"]).decide(request(origin: "https://app.example.com:443"))) == 101)
        #expect(status(policy(["https://app.example.com"]).decide(request(origin: "http://app.example.com"))) == 403)
        #expect(status(policy(["*"]).decide(request(origin: "http://anything.example"))) == 101)
    }

    @Test("development mode answers only requests to a loopback host (DNS rebinding): 403 for any other Host or none, whatever the path")
    func developmentHost() {
        let development = WebSocketUpgradePolicy(settings: .init(enabled: true, path: "/im", development: true), tls: false)
        for host in ["localhost:6980", "LOCALHOST", "localhost.", "app.localhost:6980", "127.0.0.1:6980", "127.1.2.3", "[::1]:6980", "[::1]"] {
            #expect(status(development.decide(request(host: host))) == 101, "\(host)")
            #expect(development.refuseHost(host) == nil, "\(host)")
        }
        for host: String? in [
            "rebind.example:6980", "gw.example.com", "localhost.example.com", "127.0.0.1.example.com", "128.0.0.1", "127.0.0.256",
            "[::2]", "[::1]x", "localhost:x", "local host", "", nil,
        ] {
            #expect(status(development.decide(request(host: host))) == 403, "\(host ?? "no Host")")
            #expect(status(development.decide(request("/other", host: host))) == 403, "before the path is looked at")
        }
        // The rebinding page: its own origin under its own name.
        let rebinding = request(origin: "http://rebind.example:6980", host: "rebind.example:6980")
        guard case .refuse(403, "host_not_allowed", let message) = development.decide(rebinding) else {
            Issue.record("the rebinding request was not refused: \(development.decide(rebinding))")
            return
        }
        #expect(message.contains("loopback"))
        // Out of development mode the Host is the listener's business (a proxy's name, say).
        #expect(status(policy().decide(request(host: "rebind.example:6980"))) == 101)
    }

    @Test("the subprotocol must be offered, among others or alone; else 400")
    func subprotocol() {
        #expect(status(policy().decide(request(protocols: []))) == 400)
        #expect(status(policy().decide(request(protocols: ["mqtt"]))) == 400)
        #expect(status(policy().decide(request(protocols: ["mqtt, imgw.tlv.v1"]))) == 101)
        #expect(status(policy().decide(request(protocols: ["mqtt", "imgw.tlv.v1"]))) == 101)
    }

    @Test("origins are normalized: case, default ports; what is not an origin is nil")
    func normalized() {
        #expect(WebSocketUpgradePolicy.normalizedOrigin("HTTPS://App.Example.com:443") == "https://app.example.com")
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://h:8080/") == "http://h:8080")
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://[::1]:80") == "http://[::1]")
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://[::1]") == "http://[::1]")
        #expect(WebSocketUpgradePolicy.normalizedOrigin("ftp://h") == nil)
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://h/path") == nil)
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://u@h") == nil)
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://h:x") == nil)
        #expect(WebSocketUpgradePolicy.normalizedOrigin("http://") == nil)
    }
}
