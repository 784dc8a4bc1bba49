// swift-tools-version:6.2
// swift-openapi-generator, to regenerate Sources/IMGatewayAPI/Generated from docs/openapi.yaml
// (`make openapi`). A package of its own, so that building imgw never builds the generator.
import PackageDescription

let package = Package(
    name: "openapi-tools",
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator.git", exact: "1.14.3"),
    ]
)
