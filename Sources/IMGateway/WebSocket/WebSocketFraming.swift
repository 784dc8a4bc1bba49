import NIOCore
import NIOWebSocket

/// The rules of RFC 6455 for the frames a browser device sends, as a pure state machine: it
/// says what to do with each frame (hand its bytes to the TLV decoder, answer a ping, close
/// with a code), and what closing the connection must send. ``WebSocketDeviceFraming`` does
/// the I/O.
///
/// Binary messages carry the TLV byte stream (docs/PROTOCOL.md 1.1): their payloads, fragments
/// included, are the stream, so a TLV frame may span messages and fragments and a message may
/// hold several TLV frames. Nothing is gathered per message: a message that never ends costs
/// nothing more than a TCP stream that never ends (the TLV decoder's limit and the connection's
/// timeouts bound both).
struct WebSocketFraming: Sendable {
    /// The most pings a device may send in one second before it is closed with 1008: each is
    /// answered, and answering is all a ping flood asks of the gateway.
    static let maxPingsPerSecond = 10

    /// What a received frame, or the wish to close, asks for.
    enum Action: Equatable, Sendable {
        /// Hand the frame's (unmasked) payload to the TLV decoder.
        case deliver
        /// Answer with a pong carrying the ping's payload.
        case pong
        /// Nothing (a pong, or a frame after closing began).
        case ignore
        /// Send a close frame with this code and reason, then close the connection.
        case close(WebSocketErrorCode, String)
    }

    /// Closing: nothing is read or sent after the close frame.
    private(set) var closing = false
    /// A binary message has begun and its final fragment has not come.
    private var inMessage = false
    /// The second of the current ping count, and the count.
    private var pingWindow: (start: NIODeadline, count: Int)?
    /// Set by graceful shutdown: closing then says 1001 (going away) rather than 1000.
    var goingAway = false

    /// What to do with `frame`, received at `now`.
    mutating func received(_ frame: WebSocketFrame, now: NIODeadline) -> Action {
        guard !closing else { return .ignore }
        if frame.rsv1 || frame.rsv2 || frame.rsv3 {
            return close(.protocolError, "reserved bits set (no extension was negotiated)")
        }
        if frame.maskKey == nil {
            return close(.protocolError, "a client frame must be masked")
        }
        switch frame.opcode {
        case .binary:
            if inMessage { return close(.protocolError, "a new message began before the last one ended") }
            inMessage = !frame.fin
            return .deliver
        case .continuation:
            if !inMessage { return close(.protocolError, "a continuation frame without a message to continue") }
            inMessage = !frame.fin
            return .deliver
        case .text:
            return close(.unacceptableData, "text messages are not accepted: TLV frames travel in binary messages")
        case .ping:
            if let window = pingWindow, now - window.start < .seconds(1) {
                pingWindow = (window.start, window.count + 1)
            } else {
                pingWindow = (now, 1)
            }
            if pingWindow!.count > Self.maxPingsPerSecond {
                return close(.policyViolation, "more than \(Self.maxPingsPerSecond) pings in a second")
            }
            return .pong
        case .pong:
            return .ignore
        case .connectionClose:
            return closeReceived(frame.unmaskedData)
        default:
            return close(.protocolError, "opcode \(frame.opcode) is reserved")
        }
    }

    /// The device's close frame: echo its code (RFC 6455 5.5.1), or 1002 for one that may not be
    /// sent.
    private mutating func closeReceived(_ payload: ByteBuffer) -> Action {
        var payload = payload
        guard payload.readableBytes > 0 else { return close(.normalClosure, "") }
        guard let code = payload.readInteger(as: UInt16.self) else {
            return close(.protocolError, "a close frame's payload of one byte")
        }
        guard Self.maySend(code) else { return close(.protocolError, "close code \(code) may not be sent") }
        guard String(validating: payload.readableBytesView, as: UTF8.self) != nil else {
            return close(.protocolError, "a close frame's reason that is not UTF-8")
        }
        return close(WebSocketErrorCode(codeNumber: Int(code)), "")
    }

    /// Whether an endpoint may put `code` in a close frame (RFC 6455 7.4: 1000-1003, 1007-1011,
    /// and 3000-4999; never 1004-1006 or 1015).
    static func maySend(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014: true
        case 3000...4999: true
        default: false
        }
    }

    /// The connection is closing (the device's session ended, the gateway shuts down): the
    /// close frame to send first, unless one was sent.
    mutating func closeRequested() -> Action {
        guard !closing else { return .ignore }
        return goingAway ? close(.goingAway, "the gateway is shutting down") : close(.normalClosure, "")
    }

    /// A WebSocket protocol error the frame decoder found (a frame over the limit, a fragmented or
    /// long control frame).
    mutating func decodingFailed(_ error: NIOWebSocketError) -> Action {
        guard !closing else { return .ignore }
        switch error {
        case .invalidFrameLength: return close(.messageTooLarge, "a frame larger than the limit")
        case .fragmentedControlFrame: return close(.protocolError, "a fragmented control frame")
        case .multiByteControlFrameLength: return close(.protocolError, "a control frame over 125 bytes")
        }
    }

    private mutating func close(_ code: WebSocketErrorCode, _ reason: String) -> Action {
        closing = true
        return .close(code, reason)
    }
}
