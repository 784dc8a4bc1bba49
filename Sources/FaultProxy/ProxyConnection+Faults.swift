#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// The faults of one connection: the switches (blackhole, cut, profile changes) and the
/// Poisson timers of stalls and cuts. On the connection's event loop, like the rest of it.
extension ProxyConnection {
    // MARK: Controls

    /// Stops forwarding for good: both directions' queues are dropped, both sides keep
    /// being read and what arrives is discarded, and a close of one side is not passed to
    /// the other.
    func blackhole() {
        guard phase == .open || phase == .connecting, !blackholed else { return }
        blackholed = true
        core.updateStatistics { $0.blackholed += 1 }
        dropEverything()
        resumeReading(.client)
        resumeReading(.server)
    }

    /// Closes both sides abruptly (`SO_LINGER` 0: the peers see a reset).
    func cut() {
        guard phase == .open || phase == .connecting else { return }
        phase = .closing
        wasCut = true
        core.updateStatistics { $0.cuts += 1 }
        dropEverything()
        Self.reset(client)
        if let server { Self.reset(server) }
    }

    /// Uses `profile` from now on: for chunks that arrive later, and for the next stall
    /// and cut, which are drawn anew (a Poisson process has no memory).
    func apply(_ profile: FaultProfile) {
        self.profile = profile
        scheduleNextStall()
        scheduleNextCut()
    }

    /// Whether ``FaultProxy/holdAll(_:)`` is on: nothing is forwarded, no stall or cut begins.
    var isHeld: Bool { core.held.load(ordering: .acquiring) }

    /// The hold began: the stall and cut timers stop (a stall under way runs its course);
    /// ``pump(_:)`` forwards nothing until ``holdEnded()``.
    func holdBegan() {
        nextStall?.cancel()
        nextStall = nil
        nextCut?.cancel()
        nextCut = nil
    }

    /// The hold ended: what was queued meanwhile is forwarded, and the stall and cut timers
    /// run again (drawn anew: a Poisson process has no memory).
    func holdEnded() {
        guard phase == .open, !blackholed, !isHeld else { return }
        scheduleNextStall()
        scheduleNextCut()
        for direction in ProxyDirection.allCases { pump(direction) }
    }

    /// Applies a blackholeAll or cutAll that happened since this connection last looked;
    /// true if the connection no longer forwards.
    @discardableResult
    func checkControls() -> Bool {
        if number < core.cutBelow.load(ordering: .acquiring) {
            cut()
        } else if !blackholed && number < core.blackholedBelow.load(ordering: .acquiring) {
            blackhole()
        }
        return phase != .open || blackholed
    }

    // MARK: Stalls and cuts

    func scheduleNextStall() {
        nextStall?.cancel()
        nextStall = nil
        guard phase == .open, !blackholed, !stalled, !isHeld, let rate = profile.effectiveStallRate else { return }
        nextStall = eventLoop.assumeIsolated().scheduleTask(in: random.exponential(perMinute: rate)) {
            self.nextStall = nil
            self.beginStall()
        }
    }

    func beginStall() {
        guard phase == .open, !blackholed, !stalled, !isHeld else { return }
        stalled = true
        core.updateStatistics { $0.stalls += 1 }
        stallEnd = eventLoop.assumeIsolated().scheduleTask(in: random.uniform(profile.stallDuration)) {
            self.stallEnd = nil
            self.stalled = false
            for direction in ProxyDirection.allCases { self.pump(direction) }
            self.scheduleNextStall()
        }
    }

    func scheduleNextCut() {
        nextCut?.cancel()
        nextCut = nil
        guard phase == .open, !blackholed, !isHeld, let rate = profile.effectiveCutRate else { return }
        nextCut = eventLoop.assumeIsolated().scheduleTask(in: random.exponential(perMinute: rate)) {
            self.nextCut = nil
            // A hold that began after this was scheduled cancels it on its way here; until then
            // the switch already says so.
            guard !self.isHeld else { return }
            self.cut()
        }
    }

    // MARK: Helpers

    func cancelTimers() {
        stallEnd?.cancel()
        stallEnd = nil
        stalled = false
        nextStall?.cancel()
        nextStall = nil
        nextCut?.cancel()
        nextCut = nil
    }

    /// Cancels the fault timers and drops both queues, counting the bytes as discarded.
    func dropEverything() {
        cancelTimers()
        var dropped = 0
        for direction in ProxyDirection.allCases {
            let pipe = pipe(direction)
            pipe.timer?.cancel()
            pipe.timer = nil
            dropped += pipe.line.removeAll()
        }
        if dropped > 0 { core.updateStatistics { [dropped] in $0.bytesDiscarded += dropped } }
    }

    /// Closes `channel` with `SO_LINGER` 0, so that the peer sees a reset.
    static func reset(_ channel: any Channel) {
        guard let options = channel as? any SocketOptionProvider else {
            channel.close(promise: nil)
            return
        }
        options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
