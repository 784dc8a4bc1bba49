import IMWire
import NIOCore

/// A logged-in device that only keeps its connection alive: once started, a HEARTBEAT
/// every `interval` (the one LOGIN_OK announces unless overridden), at a random phase so
/// that thousands of devices do not beat together.
final class IdleDevice: DeviceBehaviour {
    private let counters: ConnectCounters
    private let override: TimeAmount?
    private var announced: TimeAmount = .seconds(30)
    private var timer: RepeatedTask?
    private var lastSequence = BenchDeviceHandler.loginSequence

    init(counters: ConnectCounters, interval: TimeAmount?) {
        self.counters = counters
        self.override = interval
    }

    func loggedIn(_ ok: LoginOK, context: ChannelHandlerContext) {
        if let seconds = ok.heartbeatInterval, seconds > 0 { announced = .seconds(Int64(seconds)) }
    }

    func handle(_ event: BenchEvent, context: ChannelHandlerContext) {
        switch event {
        case .start:
            guard timer == nil else { return }
            let interval = override ?? announced
            let phase = TimeAmount.nanoseconds(Int64.random(in: 0..<max(1, interval.nanoseconds)))
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleRepeatedTask(initialDelay: phase, delay: interval) { _ in
                let (device, context) = bound.value
                device.beat(context)
            }
        case .stop:
            timer?.cancel()
            timer = nil
        }
    }

    private func beat(_ context: ChannelHandlerContext) {
        lastSequence &+= 1
        let frame = IMFrame.heartbeat(
            sequence: lastSequence, timestamp: MonotonicClock.unixSeconds(), sessionID: BenchDeviceHandler.sessionID)
        context.writeAndFlush(NIOAny(frame), promise: nil)
        counters.heartbeatsSent.add(1, ordering: .relaxed)
    }

    func acked(_ frame: IMFrame, context: ChannelHandlerContext) {
        counters.heartbeatAcks.add(1, ordering: .relaxed)
    }

    func closed() {
        timer?.cancel()
        timer = nil
        counters.closedAfterLogin.add(1, ordering: .relaxed)
    }
}
