import IMGateway

print("imgw \(IMGatewayInfo.version)")
