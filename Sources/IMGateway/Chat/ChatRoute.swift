/// Where the copies of an accepted chat are published: the MQTT session of the device that sent
/// it, or a session the gateway owns (its control client), which publishes the server API's
/// chats and takes over from a device's session that is gone (``ChatAcceptance``).
protocol ChatRoute: Sendable {
    /// Starts `publishes` in their order, at most `window` waiting for the broker at once;
    /// `completion` gets each one's outcome (`nil`: the broker has it), in their order, once
    /// every one is settled. It is called exactly once, on any thread.
    func publishChat(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([(any Error)?]) -> Void)
}
