// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "IMGateway",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Mosquitto", targets: ["Mosquitto"]),
        .library(name: "IMWire", targets: ["IMWire"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        // System libraries (apt providers so `swift build` names the missing package).
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),

        // The libmosquitto wrapper: knows only CMosquitto.
        .target(name: "Mosquitto", dependencies: ["CMosquitto"]),

        // The TLV wire protocol: knows only NIOCore and zlib.
        .target(
            name: "IMWire",
            dependencies: [
                "CZlib",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),

        .testTarget(name: "MosquittoTests", dependencies: ["Mosquitto"]),
        .testTarget(
            name: "IMWireTests",
            dependencies: [
                "IMWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            resources: [.copy("Fixtures")]
        ),
        // Tests against real processes (mosquitto, later imgw), started on free ports.
        .testTarget(name: "IntegrationTests", dependencies: ["Mosquitto"]),
    ]
)
