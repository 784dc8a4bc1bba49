/// Orders sent to a device's channel from the benchmark's control task (as user inbound
/// events, so they run on the channel's event loop).
enum BenchEvent: Sendable {
    /// Start sending: chat senders start their workload, idle devices their heartbeats.
    case start
    /// Stop sending new messages (what is in flight still completes).
    case stop
}
