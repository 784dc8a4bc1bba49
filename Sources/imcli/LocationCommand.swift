import ArgumentParser

/// `imcli location share|watch`.
struct LocationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "location",
        abstract: "Share this user's position with others, or watch positions shared with this user.",
        discussion: """
              imcli location share --as alice --with bob --lat 52.52 --lon 13.405
              imcli location watch --as bob alice
              [location] alice/cli-location 52.52,13.405
            """,
        subcommands: [ShareLocation.self, WatchLocation.self])
}
