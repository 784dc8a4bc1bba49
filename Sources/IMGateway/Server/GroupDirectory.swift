import AsyncToolkit
import Logging
import Synchronization

/// The members of groups, for this gateway's group chats and typing: ``GroupMemberships``
/// with the I/O. A group is looked up on the broker through the control client the first
/// time (its retained `{prefix}/g/{group}/members/+`), then followed, so later lookups cost a
/// dictionary access.
final class GroupDirectory: Sendable {
    private struct State: Sendable {
        var memberships: GroupMemberships
        /// Why the last lookup of a group failed, for those that waited for it.
        var failures: [String: ControlClient.Failure] = [:]
    }

    /// Lookups of a group being followed wait here for its members.
    private let state: AsyncCondition<State>
    private let follower = Mutex<ControlClient?>(nil)
    private let topics: GatewayTopics

    init(topics: GatewayTopics, capacity: Int) {
        self.topics = topics
        state = AsyncCondition(State(memberships: GroupMemberships(capacity: capacity)))
    }

    /// Sets the client that follows groups on the broker (the gateway's control client).
    func follow(with control: ControlClient) {
        follower.withLock { $0 = control }
    }

    /// The members of `group` (user → since, Unix ms); empty for a group that does not exist.
    /// Throws ``ControlClient/Failure`` when the broker cannot be asked.
    func members(of group: String) async throws -> [String: UInt64] {
        let lookup = state.withLock { $0.memberships.lookup(group) }
        switch lookup {
        case .known(let members):
            return members
        case .wait:
            // Until it is known, or forgotten after a failure (not cancellable: the lookup
            // under way settles it).
            let settled = await Task { [state] in
                await state.wait { (state: inout State) -> Result<[String: UInt64], ControlClient.Failure>? in
                    switch state.memberships.members(of: group) {
                    case .some(.some(let members)): .success(members)
                    case .none: .failure(state.failures[group] ?? .notConnected)
                    case .some(.none): nil
                    }
                }
            }.value
            return try (settled ?? .failure(.notConnected)).get()
        case .follow:
            guard let control = follower.withLock({ $0 }) else {
                finish(group, .failure(ControlClient.Failure.notConnected))
                throw ControlClient.Failure.notConnected
            }
            do {
                try await control.follow(topics.groupMembersFilter(group: group))
            } catch {
                finish(group, .failure(error))
                throw error
            }
            let synced = state.withLock { $0.memberships.synced(group) }
            guard let synced else {
                finish(group, .failure(ControlClient.Failure.notConnected))
                throw ControlClient.Failure.notConnected
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

    /// A membership of a followed group arrived (`since`) or was cleared (`nil`).
    func apply(group: String, user: String, since: UInt64?) {
        state.withLock { $0.memberships.apply(group: group, user: user, since: since) }
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
            state.failures[group] = error as? ControlClient.Failure ?? .notConnected
            state.memberships.failed(group)
        }
    }
}
