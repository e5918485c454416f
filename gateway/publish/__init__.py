"""Publishing: request bodies parsed and validated into batches, placed on partitions, handed to
storage."""
