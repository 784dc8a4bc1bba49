/// Carries out a ``ChaosSchedule`` on a ``ChaosCluster``: each fault at its time, undone after
/// its duration (what was killed started again, what was stopped continued, a link passing
/// again), each in a task of its own so that faults overlap as planned. A fault on a part that
/// an earlier fault still holds down is skipped (and logged). Every fault's window, from its
/// start until its undo completed, goes to the ledger for the recovery times.
struct ChaosNemesis: Sendable {
    let cluster: ChaosCluster
    let devices: [ChaosDevice]
    let ledger: ChaosLedger

    /// Runs every fault of `schedule`, its times counted from `start` (the ledger's clock);
    /// returns once the last one is undone.
    func run(_ schedule: ChaosSchedule, from start: Double) async {
        await withTaskGroup(of: Void.self) { group in
            for planned in schedule.faults {
                group.addTask {
                    let wait = start + planned.at - ledger.now
                    if wait > 0 { try? await Task.sleep(for: .seconds(wait)) }
                    await inject(planned)
                }
            }
        }
    }

    private func inject(_ planned: ScheduledFault) async {
        let fault = planned.fault
        let duration = planned.duration
        let began = ledger.now
        let held = String(format: "%.1f s", duration)
        var applied = true
        do {
            switch fault {
            case .killGateway(let index):
                applied = await cluster.killGateway(index)
                if applied {
                    ledger.log("\(fault); started again in \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    try await cluster.startGateway(index)
                }
            case .killBroker:
                applied = await cluster.killBroker()
                if applied {
                    ledger.log("\(fault); started again in \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    try await cluster.startBroker()
                }
            case .killGatewayAndBroker(let index):
                let gateway = await cluster.killGateway(index)
                let broker = await cluster.killBroker()
                applied = gateway || broker
                if applied {
                    ledger.log("\(fault) (\(gateway ? "gateway" : "gateway was down"), \(broker ? "broker" : "broker was down")); started again in \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    if broker { try await cluster.startBroker() }
                    if gateway { try await cluster.startGateway(index) }
                }
            case .pauseGateway(let index):
                applied = await cluster.pauseGateway(index)
                if applied {
                    ledger.log("\(fault) for \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    await cluster.resumeGateway(index)
                }
            case .pauseBroker:
                applied = await cluster.pauseBroker()
                if applied {
                    ledger.log("\(fault) for \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    await cluster.resumeBroker()
                }
            case .pauseDatabase:
                applied = await cluster.pauseDatabase()
                if applied {
                    ledger.log("\(fault) for \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    await cluster.resumeDatabase()
                }
            case .killDatabase:
                applied = await cluster.killDatabase()
                if applied {
                    ledger.log("\(fault); started again in \(held)")
                    try await Task.sleep(for: .seconds(duration))
                    try await cluster.startDatabase()
                }
            case .cutDevice(let index):
                ledger.log("\(fault) (\(devices[index].name))")
                await cluster.deviceLinks[index].cutAll()
            case .stallDevice(let index):
                ledger.log("\(fault) (\(devices[index].name)) for \(held)")
                let link = await cluster.deviceLinks[index]
                link.holdAll(true)
                try await Task.sleep(for: .seconds(duration))
                link.holdAll(false)
            case .cutBrokerLink(let index):
                ledger.log("\(fault)")
                cluster.brokerLinks[index].cutAll()
            case .stallBrokerLink(let index):
                ledger.log("\(fault) for \(held)")
                cluster.brokerLinks[index].holdAll(true)
                try await Task.sleep(for: .seconds(duration))
                cluster.brokerLinks[index].holdAll(false)
            case .deviceOffline(let index):
                // The device closes its app between two sends; it logs that itself.
                await devices[index].requestOffline(duration)
                return
            }
        } catch {
            ledger.log("\(fault): cancelled (\(error))")
        }
        guard applied else {
            ledger.log("\(fault): skipped, the part is already down or stopped")
            return
        }
        let ended = ledger.now
        if duration > 0 { ledger.log("\(fault): undone after \(String(format: "%.2f", ended - began)) s") }
        ledger.window(ChaosRecovery.Window(start: began, end: ended, device: fault.device, fault: fault.description))
    }
}
