import NIOCore

/// Backpressure on what a device sends: reading stops while too many of its chat messages
/// wait for the broker, while its socket does not take what it is sent (so that the
/// replies to its requests cannot pile up in the outbound buffer), or for a while after its
/// chat was refused RATE_LIMITED (whatever it sends then would be refused too: a device that
/// ignores RETRY_AFTER costs a read now and then, not a refusal for every frame), and resumes
/// once none holds.
public struct ReadGate: Sendable, Hashable {
    /// Past this many chat messages of one device waiting for the broker, reading stops.
    /// Far above what a well-behaved device has unACKed.
    public static let maxWaitingChats = 4096

    /// Chat messages accepted from the device and not handed to the MQTT client yet.
    public private(set) var waitingChats = 0
    /// Whether the device's socket takes writes.
    public private(set) var writable = true
    /// A read was asked for and held back.
    public private(set) var readPending = false
    /// Reading waits until then: the device's chat was refused RATE_LIMITED.
    public private(set) var pausedUntil: NIODeadline?

    public init() {}

    private var open: Bool { self.waitingChats < Self.maxWaitingChats && self.writable && self.pausedUntil == nil }

    /// No reading until `deadline` (a later pause running keeps its end).
    public mutating func pause(until deadline: NIODeadline) {
        self.pausedUntil = max(self.pausedUntil ?? deadline, deadline)
    }

    /// The time is `now`: whether a pause ended and a held read should happen now.
    public mutating func pauseEnded(now: NIODeadline) -> Bool {
        guard let until = self.pausedUntil, now >= until else { return false }
        self.pausedUntil = nil
        return self.update()
    }

    /// The channel asks to read: whether to read now (else it is held until
    /// ``update(waitingChats:writable:)`` or ``pauseEnded(now:)`` says so).
    public mutating func readRequested() -> Bool {
        if self.open { return true }
        self.readPending = true
        return false
    }

    /// The number of chat messages waiting changed, or writability did: whether a held
    /// read should happen now.
    public mutating func update(waitingChats: Int? = nil, writable: Bool? = nil) -> Bool {
        if let waitingChats { self.waitingChats = waitingChats }
        if let writable { self.writable = writable }
        guard self.readPending, self.open else { return false }
        self.readPending = false
        return true
    }
}
