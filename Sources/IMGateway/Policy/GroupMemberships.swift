/// The members of the groups one gateway has looked up, kept up to date while it follows
/// them (``GroupDirectory`` does the I/O). A group is looked up once, then followed on the
/// broker: every change of its retained memberships arrives. At most ``capacity`` groups are
/// followed; the one used least recently is let go first.
///
/// Without an archive the broker's retained memberships are the groups. With one
/// (``archiveBacked``), the archive is: a lookup subscribes first, then reads the archive, and
/// the group is what the archive held with the live changes since the subscription on top.
/// The broker's retained copies (sent to a new subscription) are then ignored, since a broker
/// that restarted from an older save, or lost its state, replays old or no memberships; they
/// count only for a group the archive does not know (made before archives kept groups), which
/// the directory then records there.
struct GroupMemberships: Sendable {
    /// What a lookup of a group has to do.
    enum Lookup: Equatable {
        /// The members are known (user → since, Unix ms); none: the group does not exist.
        case known([String: UInt64])
        /// Follow the group on the broker (subscribe, wait for its retained members), then
        /// ``synced(_:)``.
        case follow
        /// Another lookup is following it already: wait for it.
        case wait
    }

    private struct Group {
        var members: [String: UInt64] = [:]
        var complete = false
        var lastUse: UInt64
        /// While it is looked up: the broker's retained memberships, and changes published
        /// since the subscription (`nil`: removed), in the order they came.
        var replayed: [String: UInt64] = [:]
        var live: [(user: String, since: UInt64?)] = []
    }

    /// How many groups are followed at most.
    let capacity: Int
    /// Whether the archive holds the groups (see the type's description).
    let archiveBacked: Bool
    private var groups: [String: Group] = [:]
    private var clock: UInt64 = 0

    init(capacity: Int, archiveBacked: Bool = false) {
        precondition(capacity > 0)
        self.capacity = capacity
        self.archiveBacked = archiveBacked
    }

    /// Groups followed or being followed.
    var count: Int { groups.count }

    /// A lookup of `group`.
    mutating func lookup(_ group: String) -> Lookup {
        clock += 1
        guard var entry = groups[group] else {
            groups[group] = Group(lastUse: clock)
            return .follow
        }
        entry.lastUse = clock
        groups[group] = entry
        return entry.complete ? .known(entry.members) : .wait
    }

    /// The members of `group` if it is followed and known (a use, for the least recently used
    /// order); `nil` otherwise (nothing is looked up).
    mutating func known(_ group: String) -> [String: UInt64]? {
        guard var entry = groups[group], entry.complete else { return nil }
        clock += 1
        entry.lastUse = clock
        groups[group] = entry
        return entry.members
    }

    /// The members of `group` if it is followed and complete; `.some(nil)` while it is being
    /// looked up; `nil` when it is not followed. Changes nothing.
    func members(of group: String) -> [String: UInt64]?? {
        guard let entry = groups[group] else { return nil }
        return entry.complete ? .some(entry.members) : .some(nil)
    }

    /// A membership of a followed group arrived (or was cleared: `since` nil): `retained`, the
    /// broker's copy sent to a new subscription; otherwise a change published now.
    /// Memberships of groups not followed are ignored.
    mutating func apply(group: String, user: String, since: UInt64?, retained: Bool = false) {
        guard var entry = groups[group] else { return }
        if entry.complete {
            guard !(retained && archiveBacked) else { return }
            entry.members[user] = since
        } else if retained {
            entry.replayed[user] = since
        } else {
            entry.live.append((user, since))
        }
        groups[group] = entry
    }

    /// The lookup of `group` is done: the broker's retained memberships have arrived, and
    /// `archived` is what the archive holds (`nil`: it does not know the group, or there is
    /// none). Returns its members, and the groups to let go (unsubscribe) to stay within
    /// ``capacity``, least recently used first, never `group` or one still being looked up.
    /// `nil` when the group was forgotten meanwhile: the lookup failed.
    mutating func synced(_ group: String, archived: [String: UInt64]? = nil) -> (members: [String: UInt64], release: [String])? {
        guard var entry = groups[group] else { return nil }
        var members = archived ?? entry.replayed
        for change in entry.live { members[change.user] = change.since }
        entry.members = members
        entry.replayed = [:]
        entry.live = []
        entry.complete = true
        groups[group] = entry
        var release: [String] = []
        if groups.count > capacity {
            let candidates = groups.filter { $0.key != group && $0.value.complete }.sorted { $0.value.lastUse < $1.value.lastUse }
            for (name, _) in candidates.prefix(groups.count - capacity) {
                groups[name] = nil
                release.append(name)
            }
        }
        return (members, release)
    }

    /// The lookup of `group` failed: it is not followed.
    mutating func failed(_ group: String) {
        if groups[group]?.complete == false { groups[group] = nil }
    }

    /// The connection that follows the groups is new: the groups followed on the old one are
    /// not any more. Lookups under way stay: they subscribe on the new connection, or their
    /// marker never comes and they fail.
    mutating func reset() {
        groups = groups.filter { !$0.value.complete }
    }
}
