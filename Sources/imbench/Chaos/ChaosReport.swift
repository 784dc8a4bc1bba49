import Foundation

/// What a chaos run prints: the fault timeline and the result table on stdout, then one JSON
/// line (also written to `--json`).
struct ChaosReport: Sendable {
    var seed: UInt64
    var command: String
    var seconds: Double
    var gateways: Int
    var users: Int
    var devices: [String]
    var rate: Double
    var scheduled: Int
    var verdict: ChaosVerdict
    var backs: [ChaosRecovery.Back]
    var maxRecovery: Double
    var lastLogins: (synced: Int, of: Int)
    var snapshot: ChaosLedger.Snapshot

    /// Spells that took longer than the bound.
    var slowBacks: [ChaosRecovery.Back] { backs.filter { $0.seconds > maxRecovery }.sorted { $0.seconds > $1.seconds } }

    /// Gateways that exited by themselves (a crash is a defect whatever else held).
    var crashes: Int { snapshot.notes["gateway crashed"] ?? 0 }

    var passed: Bool { verdict.passed && slowBacks.isEmpty && lastLogins.synced == lastLogins.of && crashes == 0 }

    var text: String {
        var lines: [String] = []
        lines.append("imbench chaos: seed \(seed), \(Int(seconds)) s, \(gateways) gateways, \(users) users on \(devices.count) devices, \(Int(rate)) chats/s")
        lines.append("repeat with: \(command)")
        lines.append("")
        lines.append("Faults (\(scheduled) scheduled):")
        lines += snapshot.timeline.map { "  " + $0 }
        lines.append("")
        lines.append("Result:")
        let refused = verdict.refused.isEmpty ? "0" : verdict.refused.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        lines.append("  sent \(verdict.sent), acked \(verdict.acked), refused for good \(refused), unanswered \(verdict.unanswered.count + verdict.pending.count)")
        lines.append("  refused with a time to retry and sent again by the clients (fine): \(snapshot.retried)")
        lines.append("  deliveries owed \(verdict.owed), made \(verdict.delivered); unacknowledged messages delivered anyway \(verdict.unackedDelivered)")
        lines.append("  lost \(verdict.lost.count), duplicated \(verdict.duplicated.count), unexpected \(verdict.unexpected.count), reordered \(verdict.reordered.count)")
        let sortedBacks = backs.map(\.seconds).sorted()
        let worst = sortedBacks.last.map { String(format: "%.2f s", $0) } ?? "-"
        let median = sortedBacks.isEmpty ? "-" : String(format: "%.2f s", sortedBacks[sortedBacks.count / 2])
        lines.append("  devices back after a recovery: \(backs.count) times, median \(median), longest \(worst), over \(Self.seconds(maxRecovery)): \(slowBacks.count)")
        lines.append("  last logins caught up (SYNC): \(lastLogins.synced) of \(lastLogins.of); gateways that exited by themselves: \(crashes)")
        if !snapshot.notes.isEmpty {
            lines.append("  events: " + snapshot.notes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        for (title, list) in [
            ("lost", verdict.lost.map(\.description)), ("duplicated", verdict.duplicated.map(\.description)),
            ("unexpected", verdict.unexpected.map(\.description)), ("reordered", verdict.reordered.map(\.description)),
            ("unanswered", verdict.unanswered + verdict.pending.map { "\($0): still pending" }),
            ("slow", slowBacks.map { "device \($0.device + 1) (\(devices[$0.device])) back at \(String(format: "%.2f", $0.at)) s, \(String(format: "%.2f", $0.seconds)) s after \($0.after ?? "it went down")" }),
        ] where !list.isEmpty {
            lines.append("  \(title) (\(list.count)), first ones:")
            lines += list.prefix(10).map { "    " + $0 }
        }
        if !snapshot.examples.isEmpty {
            lines.append("  first events:")
            lines += snapshot.examples.prefix(15).map { "    " + $0 }
        }
        lines.append("")
        lines.append(passed ? "PASS" : "FAIL")
        return lines.joined(separator: "\n")
    }

    var json: JSONLine {
        var line = JSONLine()
        line.add("benchmark", "chaos")
        line.add("seed", .string(String(seed)))
        line.add("seconds", seconds, decimals: 0)
        line.add("gateways", gateways)
        line.add("users", users)
        line.add("devices", devices.count)
        line.add("rate", rate, decimals: 1)
        line.add("faults_scheduled", scheduled)
        line.add("timeline", .array(snapshot.timeline.map { .string($0) }))
        line.add("sent", verdict.sent)
        line.add("acked", verdict.acked)
        var refused = JSONLine()
        for (code, count) in verdict.refused.sorted(by: { $0.key < $1.key }) { refused.add(code, count) }
        line.add("refused", .object(refused))
        line.add("unanswered", verdict.unanswered.count + verdict.pending.count)
        line.add("refused_and_retried", snapshot.retried)
        line.add("deliveries_owed", verdict.owed)
        line.add("deliveries_made", verdict.delivered)
        line.add("unacked_delivered", verdict.unackedDelivered)
        line.add("lost", verdict.lost.count)
        line.add("duplicated", verdict.duplicated.count)
        line.add("unexpected", verdict.unexpected.count)
        line.add("reordered", verdict.reordered.count)
        let sortedBacks = backs.map(\.seconds).sorted()
        line.add("recoveries", backs.count)
        line.add("recovery_max_s", sortedBacks.last, decimals: 2)
        line.add("recovery_median_s", sortedBacks.isEmpty ? nil : sortedBacks[sortedBacks.count / 2], decimals: 2)
        line.add("recoveries_over_bound", slowBacks.count)
        line.add("recovery_bound_s", maxRecovery, decimals: 1)
        line.add("last_logins_synced", lastLogins.synced)
        line.add("gateway_crashes", crashes)
        var notes = JSONLine()
        for (kind, count) in snapshot.notes.sorted(by: { $0.key < $1.key }) { notes.add(kind, count) }
        line.add("events", .object(notes))
        line.add("first_problems", .array(
            (verdict.lost + verdict.duplicated + verdict.unexpected + verdict.reordered).prefix(20).map { .string($0.description) }))
        line.add("passed", passed)
        return line
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(format: "%.1f s", value)
    }
}
