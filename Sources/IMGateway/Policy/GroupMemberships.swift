/// The members of the groups one gateway has looked up, kept up to date while it follows
/// them (``GroupDirectory`` does the I/O). A group is looked up on the broker once, then
/// followed: every change of its retained memberships arrives. At most ``capacity`` groups are
/// followed; the one used least recently is let go first.
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
    }

    /// How many groups are followed at most.
    let capacity: Int
    private var groups: [String: Group] = [:]
    private var clock: UInt64 = 0

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
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

    /// The members of `group` if it is followed and complete; `.some(nil)` while it is being
    /// looked up; `nil` when it is not followed. Changes nothing.
    func members(of group: String) -> [String: UInt64]?? {
        guard let entry = groups[group] else { return nil }
        return entry.complete ? .some(entry.members) : .some(nil)
    }

    /// A retained membership of a followed group arrived (or was cleared: `since` nil).
    /// Memberships of groups not followed are ignored.
    mutating func apply(group: String, user: String, since: UInt64?) {
        guard groups[group] != nil else { return }
        groups[group]?.members[user] = since
    }

    /// The lookup of `group` has every retained membership: its members, and the groups to
    /// let go (unsubscribe) to stay within ``capacity``, least recently used first, never
    /// `group` or one still being looked up. `nil` when the group was forgotten meanwhile: the
    /// lookup failed.
    mutating func synced(_ group: String) -> (members: [String: UInt64], release: [String])? {
        guard groups[group] != nil else { return nil }
        groups[group]?.complete = true
        let members = groups[group]?.members ?? [:]
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
