extension IMMessage {
    /// The message with its RESEND flag set, for writing it again after it may have been
    /// written before (PROTOCOL.md section 10: same MESSAGE_ID, RESEND = 1).
    ///
    /// Sets ``ChatSend/resend`` on `.chat` and ``Publish/resend`` on `.publish`; every other
    /// message the client sends has no RESEND field (a read receipt, a location update, a
    /// watch) and is returned unchanged.
    public func markedResend() -> IMMessage {
        switch self {
        case .chat(var chat):
            chat.resend = true
            return .chat(chat)
        case .publish(var publish):
            publish.resend = true
            return .publish(publish)
        default:
            return self
        }
    }
}
