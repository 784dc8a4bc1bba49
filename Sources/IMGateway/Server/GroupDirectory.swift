import AsyncToolkit
import IMArchive
import Logging
import Synchronization

/// The members of groups, for this gateway's group chats and typing: ``GroupMemberships``
/// with the I/O. A group is looked up the first time (the control client subscribes to its
/// retained `{prefix}/g/{group}/members/+`; with a message archive, the archive is read then,
/// and holds the truth), then followed, so later lookups cost a dictionary access.
final class GroupDirectory: Sendable {
    private struct State: Sendable {
        var memberships: GroupMemberships
        /// Why the last lookup of a group failed, for those that waited for it.
        var failures: [String: any Error] = [:]
    }

    /// Lookups of a group being followed wait here for its members.
    private let state: AsyncCondition<State>
    private let follower = Mutex<ControlClient?>(nil)
    private let topics: GatewayTopics
    /// Where memberships are kept, if there is an archive.
    private let archive: MessageArchive?

    init(topics: GatewayTopics, capacity: Int, archive: MessageArchive? = nil) {
        self.topics = topics
        self.archive = archive
        state = AsyncCondition(State(memberships: GroupMemberships(capacity: capacity, archiveBacked: archive != nil)))
    }

    /// Sets the client that follows groups on the broker (the gateway's control client).
    func follow(with control: ControlClient) {
        follower.withLock { $0 = control }
    }

    /// The members of `group` if this gateway follows it already (no lookup is started): what a
    /// device's group chat uses without waiting.
    func knownMembers(of group: String) -> [String: UInt64]? {
        state.withLock { $0.memberships.known(group) }
    }

    /// The members of `group` (user → since, Unix ms); empty for a group that does not exist.
    /// Throws ``ControlClient/Failure`` when the broker cannot be asked, ``ArchiveError`` when
    /// the archive cannot be read.
    func members(of group: String) async throws -> [String: UInt64] {
        let lookup = state.withLock { $0.memberships.lookup(group) }
        switch lookup {
        case .known(let members):
            return members
        case .wait:
            // Until it is known, or forgotten after a failure (not cancellable: the lookup
            // under way settles it).
            let settled = await Task { [state] in
                await state.wait { (state: inout State) -> Result<[String: UInt64], any Error>? in
                    switch state.memberships.members(of: group) {
                    case .some(.some(let members)): .success(members)
                    case .none: .failure(state.failures[group] ?? ControlClient.Failure.notConnected)
                    case .some(.none): nil
                    }
                }
            }.value
            return try (settled ?? .failure(ControlClient.Failure.notConnected)).get()
        case .follow:
            guard let control = follower.withLock({ $0 }) else {
                finish(group, .failure(ControlClient.Failure.notConnected))
                throw ControlClient.Failure.notConnected
            }
            // Subscribed first, then the archive read: a change another gateway makes
            // meanwhile is in what is read (it records before it publishes) or arrives live.
            let archived: [String: UInt64]?
            do {
                try await control.follow(topics.groupMembersFilter(group: group))
                archived = try await archive?.groupMembers(group)
            } catch {
                finish(group, .failure(error))
                throw error
            }
            let synced = state.withLock { $0.memberships.synced(group, archived: archived) }
            guard let synced else {
                finish(group, .failure(ControlClient.Failure.notConnected))
                throw ControlClient.Failure.notConnected
            }
            if let archive, archived == nil, !synced.members.isEmpty {
                // A group the broker knows and the archive does not (made before archives
                // kept groups): kept from now on. (If that fails, the next lookup tries again.)
                try? await archive.recordGroupMembers(group, synced.members.mapValues { $0 })
            }
            finish(group, .success(synced.members))
            for released in synced.release {
                // Unless a lookup follows it again meanwhile. (One that starts between this
                // check and the broker's UNSUBSCRIBE would miss later changes: only at
                // groups.cache with groups coming and going, a known limit.)
                guard state.withLock({ $0.memberships.members(of: released) == nil }) else { continue }
                await control.unfollow(topics.groupMembersFilter(group: released))
            }
            return synced.members
        }
    }

    /// A membership of a followed group arrived (`since`) or was cleared (`nil`): `retained`,
    /// the broker's copy for a new subscription; otherwise a change made now.
    func apply(group: String, user: String, since: UInt64?, retained: Bool = false) {
        state.withLock { $0.memberships.apply(group: group, user: user, since: since, retained: retained) }
    }

    /// The control client's connection is new: the groups followed before are not any more.
    /// (Lookups under way go on; their waiters wait for them.)
    func reset() {
        state.withLock { $0.memberships.reset() }
    }

    /// The lookup of `group` ended: those waiting for it see the members, or the failure.
    private func finish(_ group: String, _ result: Result<[String: UInt64], any Error>) {
        state.withLock { state in
            guard case .failure(let error) = result else {
                state.failures[group] = nil
                return
            }
            state.failures[group] = error
            state.memberships.failed(group)
        }
    }
}
