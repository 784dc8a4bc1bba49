import NIOCore

/// The gateway path of `imbench group`: the app backend creates the group through the server
/// API; the offline members log in once (so that their sessions exist) and leave; the online
/// members and the sender log in; the sender sends CHAT with GROUP, imgw publishes one copy
/// per member; then the offline members come back for their queues.
enum GatewayGroupRun {
    static func run(
        _ settings: GroupSettings, environment: BenchEnvironment, api: BenchAPI, loop: any EventLoop, runID: String, title: String
    ) async throws -> GroupPhaseResult {
        let group = "bench-\(runID)"
        let sender = "\(group)-s"
        let members = (0..<(settings.members - 1)).map { "\(group)-m\($0)" }
        let online = Array(members.prefix(settings.online))
        let offline = Array(members.dropFirst(settings.online))
        try await api.createGroup(group, members: [sender] + members)
        let ledger = GroupLedger(online: online.count, offline: offline.count)
        let link = try await loop.submit { NIOLoopBound(PairLink(), eventLoop: loop) }.get()
        let receiver: @Sendable (Int) -> @Sendable () -> any DeviceBehaviour = { member in
            { ChatReceiver(pair: member, ledger: ledger, link: link.value) }
        }

        if !offline.isEmpty {
            Log.info("\(title): \(offline.count) offline member(s) log in once and leave")
            let once = try await GatewayChatRun.connectAll(offline, environment: environment, loop: loop, behaviour: { receiver(online.count + $0) })
            for device in once { await device.close() }
            try await api.awaitOffline(offline, within: 30)
        }
        Log.info("\(title): logging in \(online.count) online member(s), then the sender")
        var devices = try await GatewayChatRun.connectAll(online, environment: environment, loop: loop, behaviour: receiver)
        do {
            let chat = settings.chat
            devices += try await GatewayChatRun.connectAll([sender], environment: environment, loop: loop, receiptNotices: settings.receiptNotices) { _ in
                { ChatSender(pair: 0, recipient: group, toGroup: true, ledger: ledger, settings: chat, link: link.value) }
            }
            let sending = devices[devices.count - 1]
            var watch: [ChatPhase.Watched] = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
            if let pid = environment.gatewayPID { watch.append(ChatPhase.Watched(label: "gateway", pid: pid, threads: true)) }
            if let pid = environment.brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: pid)) }
            let phase = try await ChatPhase.measure(
                "gateway", title: title, seconds: settings.seconds, drainSeconds: settings.drainSeconds, unit: "deliveries/s",
                ledger: ledger, watch: watch, start: { sending.send(.start) }, stop: { sending.send(.stop) })
            var result = GroupPhaseResult(path: "gateway", phase: phase, offline: GroupLedger.OfflineCounts(), catchUpSeconds: nil)
            if !offline.isEmpty {
                let back = MonotonicClock.nanoseconds()
                devices += try await GatewayChatRun.connectAll(offline, environment: environment, loop: loop, behaviour: { receiver(online.count + $0) })
                result.catchUpSeconds = try await GroupPhaseResult.awaitCatchUp(ledger, since: back, within: settings.drainSeconds)
                result.offline = ledger.offlineCounts()
                Log.info("\(title): \(result.offlineSummary)")
            }
            for device in devices { await device.close() }
            return result
        } catch {
            for device in devices { await device.close() }
            throw error
        }
    }
}
