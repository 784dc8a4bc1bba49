import ArgumentParser
import Foundation
import IMGatewayConfig

/// `imcli`: talk to an IMGateway from a terminal, for development and debugging.
@main
struct IMCLI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "imcli",
        abstract: "Chat, presence, location and pub/sub through an IMGateway (imgw), from the command line.",
        discussion: """
            With `make run` (imgw on 127.0.0.1:6969; imcli reads run/imgw.yaml):
              imcli listen --as bob               # messages, receipts, presence
              imcli send --as alice --to bob hi   # exits 0 once the gateway ACKed it
              imcli admin group create team alice bob   # the server API: a group
              imcli group send --as alice --group team hi   # to every member of team
              imcli typing --as alice --to bob    # bob's listen shows: alice is typing
              imcli presence --as bob alice       # alice's devices online/offline
              imcli location share --as alice --with bob --lat 52.52 --lon 13.405
              imcli location watch --as bob alice # one line per position of alice's
              imcli sub --as bob news             # im/t/news hello
              imcli pub --as alice news hello     # publishes hello on im/t/news
              imcli history --as bob --with alice # the conversation, oldest first
              imcli conversations --as bob        # most recent first, unread counts
              imcli read --as bob --with alice    # marked read up to the newest
              imcli send --as alice --to bob --id oops-1 oops
              imcli delete --as alice oops-1      # deleted for everyone
              imcli token alice                   # a token for the local config
              imcli admin presence bob            # bob's devices, from the server API

            --as USER mints a development token with the configuration's
            auth.jwt_secret (--config FILE, else $IMGW_CONFIG, else run/imgw.yaml
            if there is one, else the built-in defaults); --token
            TOKEN uses a token from elsewhere. --tls for a gateway with listen.tls
            (--ca FILE for a private CA). --json: one JSON object per line on stdout;
            status and connection notices go to stderr.

            pub and sub put a topic that does not start with im/ in the gateway's
            pub/sub space: news is im/t/news.

            Exit codes:
              0  ok (listen, presence, location, sub: stopped with Ctrl-C, logged out)
              1  usage: bad arguments, unreadable configuration, invalid user id
              2  refused: the gateway refused the login or the request (code shown)
              3  connection failure: cannot connect, connection closed, session ended
              4  timeout: no answer from the gateway in time
            """,
        version: IMGatewayInfo.version,
        subcommands: [
            Send.self, Listen.self, GroupCommand.self, TypingCommand.self, WatchPresence.self, LocationCommand.self, Publish.self, Subscribe.self,
            HistoryCommand.self, ConversationsCommand.self, ReadCommand.self, DeleteCommand.self, Token.self, Admin.self,
        ])

    /// Like ArgumentParser's, except that usage errors exit with 1 (not 64).
    static func main() async {
        do {
            var command = try await asyncParseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(CLIFailure.usage)
            }
            exit(withError: error)
        }
    }
}
