"""Was the GPU time well spent: achieved rates against the device's roofs."""
