extension IMFrame {
    /// A HEARTBEAT frame (type 1, empty body).
    public static func heartbeat(sequence: UInt32, timestamp: UInt32, sessionID: UInt16 = 0) -> IMFrame {
        IMFrame(type: .heartbeat, sequence: sequence, timestamp: timestamp, sessionID: sessionID)
    }

    /// The answer to a heartbeat: an ACK with the heartbeat's sequence and session id and an
    /// empty body. Valid at any time, also before login. `nil` if `frame` is not a heartbeat.
    /// - Parameters:
    ///   - frame: The received frame.
    ///   - timestamp: Unix seconds at the answering side; `nil` echoes the heartbeat's.
    public static func heartbeatReply(to frame: IMFrame, timestamp: UInt32? = nil) -> IMFrame? {
        guard frame.header.type == .heartbeat else { return nil }
        return frame.ack(timestamp: timestamp)
    }
}
