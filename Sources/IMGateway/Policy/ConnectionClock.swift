import Foundation
import NIOCore

/// The one clock of a device connection (``ConnectionStateMachine``): every deadline, rate and
/// timestamp of the connection comes from it, so that a test drives them all by moving one
/// clock.
public protocol ConnectionClock: Sendable {
    /// The monotonic time deadlines are measured on (the event loop's, for a connection).
    var now: NIODeadline { get }
    /// The wall-clock time, Unix milliseconds: server times, frame timestamps, a token's expiry.
    var wallMilliseconds: UInt64 { get }
}

extension ConnectionClock {
    /// The wall-clock time in Unix seconds, for frame timestamps.
    public var unixSeconds: UInt32 { UInt32(truncatingIfNeeded: wallMilliseconds / 1000) }
}

/// The system's clocks: `NIODeadline.now()` (what NIO's event loops schedule on) and the wall
/// clock.
public struct SystemConnectionClock: ConnectionClock {
    public init() {}

    public var now: NIODeadline { .now() }

    public var wallMilliseconds: UInt64 { UInt64(max(0, Date.now.timeIntervalSince1970 * 1000)) }
}

/// A testing event loop's clock: its `now`, which the test moves by hand, and the system's wall
/// clock plus the time the loop was moved on since the clock was made (so that a token minted
/// on the wall clock expires as the test moves time, and real time counts too, as it does for
/// the token's verification).
public struct EventLoopClock: ConnectionClock {
    private let loop: any EventLoop
    private let monotonicStart: NIODeadline

    /// The clock of `loop`, a testing event loop.
    public init(_ loop: any EventLoop) {
        self.loop = loop
        self.monotonicStart = loop.now
    }

    public var now: NIODeadline { loop.now }

    public var wallMilliseconds: UInt64 {
        let advanced = (loop.now - monotonicStart).nanoseconds / 1_000_000
        return UInt64(max(0, Date.now.timeIntervalSince1970 * 1000 + Double(advanced)))
    }
}
