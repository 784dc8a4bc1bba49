import Logging
import Synchronization

/// The members of groups, for this gateway's group chats and typing: ``GroupMemberships``
/// with the I/O. A group is looked up on the broker through the control client the first
/// time (its retained `{prefix}/g/{group}/members/+`), then followed, so later lookups cost a
/// dictionary access.
final class GroupDirectory: Sendable {
    private struct State {
        var memberships: GroupMemberships
        var waiters: [String: [CheckedContinuation<[String: UInt64], any Error>]] = [:]
    }

    private let state: Mutex<State>
    private let follower = Mutex<ControlClient?>(nil)
    private let topics: GatewayTopics

    init(topics: GatewayTopics, capacity: Int) {
        self.topics = topics
        state = Mutex(State(memberships: GroupMemberships(capacity: capacity)))
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
            return try await withCheckedThrowingContinuation { waiter in
                // Settled meanwhile (known, or forgotten after a failure), or still pending.
                let settled: Result<[String: UInt64], any Error>? = state.withLock { state in
                    switch state.memberships.members(of: group) {
                    case .some(.some(let members)): return .success(members)
                    case .none: return .failure(ControlClient.Failure.notConnected)
                    case .some(.none):
                        state.waiters[group, default: []].append(waiter)
                        return nil
                    }
                }
                if let settled { waiter.resume(with: settled) }
            }
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

    private func finish(_ group: String, _ result: Result<[String: UInt64], any Error>) {
        let waiting = state.withLock { state in
            if case .failure = result { state.memberships.failed(group) }
            return state.waiters.removeValue(forKey: group) ?? []
        }
        for waiter in waiting { waiter.resume(with: result) }
    }
}
